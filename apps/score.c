/* Host-side scoring of logits. */
#include <math.h>
#include <stddef.h>

#include "score.h"

void run_score_add(run_score *s, const float *logits, const int32_t *y, int n)
{
    int k = s->classes;
    for (int i = 0; i < n; i++) {
        const float *r = logits + (size_t)i * (size_t)k;
        int best = 0;
        for (int c = 1; c < k; c++)
            if (r[c] > r[best])
                best = c;
        double mx = r[best], e = 0;
        for (int c = 0; c < k; c++)
            e += exp((double)r[c] - mx);
        s->loss_sum += mx + log(e) - (double)r[y[i]];
        s->right += best == y[i];
        s->seen++;
        if (s->confusion)
            s->confusion[(size_t)y[i] * (size_t)k + (size_t)best]++;
    }
}

void run_mirror(float *x, int64_t rows, int width)
{
    for (int64_t r = 0; r < rows; r++)
        for (int a = 0, b = width - 1; a < b; a++, b--) {
            float v = x[r * width + a];
            x[r * width + a] = x[r * width + b];
            x[r * width + b] = v;
        }
}
