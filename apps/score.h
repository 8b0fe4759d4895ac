/* Scoring logits on the host: loss, accuracy and a confusion matrix, and the mirror images
 * of test-time flip. What exapt train and exapt eval share. */
#ifndef EXAPT_APPS_SCORE_H
#define EXAPT_APPS_SCORE_H

#include <stdint.h>

/** Running totals over the images scored so far. */
typedef struct run_score {
    int classes;
    double loss_sum; /**< cross-entropy, summed */
    int64_t right, seen;
    int64_t *confusion; /**< [classes][classes], rows the true class; NULL: not kept */
} run_score;

/** Adds n images' logits [n, classes] with their labels y: cross-entropy in double, the
 *  first largest logit as the prediction. */
void run_score_add(run_score *s, const float *logits, const int32_t *y, int n);

/** Mirrors each row of width values in place (NCHW images: rows = N * C * H). */
void run_mirror(float *x, int64_t rows, int width);

#endif
