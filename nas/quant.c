/* Post-training int8 quantization of the derived network, and its int8 evaluation pass.
 *
 * Weights: symmetric, per output channel, scale = max |w'| / 127 of the folded weights w'
 * (every batch norm folded into its convolution, nas_walk). Activations: symmetric, per
 * tensor, scale = max |v| / 127 over the calibration images, for the input and every
 * value a convolution or a sum makes; ReLU, pooling and the shifted view keep their
 * input's scale, a concatenation takes the largest of its parts'. The int8 pass runs each
 * convolution with int32 accumulation and a bias of round(b' / (s_x s_w)), then
 * requantizes by s_x s_w / s_y inside the convolution (ex_qconv2d_rq and the like: the
 * int32 sums never go through memory); the classifier's logits are dequantized by s_x s_w.
 *
 * The file: the network's metadata and `quantization`; per convolution W (i8, folded),
 * W.scale (f32 [cout]) and W.bias (f32 [cout], the folded bias), named by the f32
 * weight; classifier.weight (i8), classifier.weight.scale, classifier.bias (f32); and
 * activation_scales (f32, one per calibrated value in the walk's order). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "nas/export.h"
#include "nas/quant.h"
#include "nas/walk.h"

#define ACT_SCALES "activation_scales"

/* ---- shared ---- */

static bool keep_data(ex_ctx *ctx, nas_qbuild *b, ex_tensor *t, void *data, size_t bytes)
{
    if (!data || ex_ctx_status(ctx) != EX_OK) {
        free(data);
        if (!data)
            ex_ctx_set_error(ctx, EX_ERR_NOMEM, "quantize: out of host memory");
        return false;
    }
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        nas_qdata *d = realloc(b->d, (size_t)cap * sizeof *d);
        if (!d) {
            free(data);
            ex_ctx_set_error(ctx, EX_ERR_NOMEM, "quantize: out of host memory");
            return false;
        }
        b->d = d;
        b->cap = cap;
    }
    b->d[b->n++] = (nas_qdata){t, data, bytes};
    return true;
}

/* A persistent tensor of the graph holding data (taken over: freed with the build). */
static ex_tensor *constant(ex_ctx *ctx, nas_qbuild *b, ex_dtype dt, int nd, const int64_t *ne,
                           void *data, const char *name)
{
    ex_tensor *t = ex_state(ctx, dt, nd, ne, name);
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= ne[i];
    if (!keep_data(ctx, b, t, data, (size_t)n * (size_t)ex_dtype_size(dt)))
        return &ctx->inert;
    return t;
}

ex_status nas_qbuild_write(const nas_qbuild *b, ex_plan *plan)
{
    ex_status st = EX_OK;
    for (int i = 0; st == EX_OK && i < b->n; i++)
        st = ex_plan_write(plan, b->d[i].t, b->d[i].data, b->d[i].bytes);
    return st;
}

void nas_qbuild_free(nas_qbuild *b)
{
    for (int i = 0; b && i < b->n; i++)
        free(b->d[i].data);
    if (b) {
        free(b->d);
        memset(b, 0, sizeof *b);
    }
}

/* The convolution node of c on x with weights w (dtype of x); int8 with bias, and
 * requantized by the multiplier m, with the ReLU where relu. */
static ex_tensor *conv_node(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias, ex_tensor *m,
                            const nas_conv_desc *c, bool relu)
{
    ex_conv_params p = {{c->sh, c->sw}, {c->ph, c->pw}, {c->dil, c->dil}};
    bool q = bias != NULL;
    if (c->group > 1)
        return q ? ex_qdwconv2d_rq(ctx, x, w, bias, &p, m, relu) : ex_dwconv2d(ctx, x, w, &p);
    if (c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1)
        return q ? ex_qpwconv_rq(ctx, x, w, bias, m, relu) : ex_pwconv(ctx, x, w);
    return q ? ex_qconv2d_rq(ctx, x, w, bias, &p, m, relu) : ex_conv2d(ctx, x, w, &p);
}

/* Weight shape of c as the node takes it ([cout, cin] for a pointwise one). */
static int weight_shape(const nas_conv_desc *c, int64_t ne[4])
{
    ne[0] = c->cout;
    ne[1] = c->cin / c->group;
    ne[2] = c->kh;
    ne[3] = c->kw;
    return c->group == 1 && c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1 ? 2 : 4;
}

/* ---- calibration: the f32 pass with folded weights, every scaled value's max |v| ---- */

typedef struct cal {
    ex_network *net;
    ex_ctx *ctx;
    nas_qbuild up;      /* the f32 weights to upload */
    ex_st_tensor *file; /* the quantized file's tensors (names and data owned) */
    int nfile, cap_file;
    ex_tensor **amax; /* per value: max v and max -v, [1] each */
    int nv, cap_v;
} cal;

static cal *cal_of(void *u)
{
    return u;
}

static bool cal_failed(void *u)
{
    return ex_ctx_status(cal_of(u)->ctx) != EX_OK;
}

/* Adds a tensor to the file (name and data taken over). */
static void file_add(cal *k, const char *name, ex_st_dtype dt, int nd, const int64_t *ne,
                     void *data)
{
    size_t len = strlen(name) + 1;
    char *nm = malloc(len);
    if (nm)
        memcpy(nm, name, len);
    if (k->nfile == k->cap_file) {
        int cap = k->cap_file ? 2 * k->cap_file : 128;
        ex_st_tensor *t = realloc(k->file, (size_t)cap * sizeof *t);
        if (t) {
            k->file = t;
            k->cap_file = cap;
        }
    }
    if (!nm || !data || k->nfile == k->cap_file) {
        free(nm);
        free(data);
        ex_ctx_set_error(k->ctx, EX_ERR_NOMEM, "quantize: out of host memory");
        return;
    }
    ex_st_tensor *t = &k->file[k->nfile++];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->ndim = nd;
    memcpy(t->shape, ne, (size_t)nd * sizeof *ne);
    t->data = data;
}

/* Per-row symmetric int8 of w [rows, per] into the file as name (i8) and name.scale. */
static void file_weights(cal *k, const char *name, const float *w, int nd, const int64_t *ne)
{
    int64_t rows = ne[0], per = 1;
    for (int i = 1; i < nd; i++)
        per *= ne[i];
    int8_t *q = malloc((size_t)(rows * per) + 1);
    float *s = malloc((size_t)rows * sizeof *s);
    for (int64_t r = 0; q && s && r < rows; r++) {
        double m = 0;
        for (int64_t i = 0; i < per; i++)
            m = fmax(m, fabs((double)w[r * per + i]));
        s[r] = m > 0 ? (float)(m / 127.0) : 1.0f;
        for (int64_t i = 0; i < per; i++) {
            double v = nearbyint((double)w[r * per + i] / (double)s[r]);
            q[r * per + i] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
        }
    }
    char sname[200];
    snprintf(sname, sizeof sname, "%s.scale", name);
    file_add(k, name, EX_ST_I8, nd, ne, q);
    file_add(k, sname, EX_ST_F32, 1, &rows, s);
}

/* Records v as a calibrated value. */
static void calibrate(cal *k, ex_tensor *v)
{
    if (k->nv + 2 > k->cap_v) {
        int cap = k->cap_v ? 2 * k->cap_v : 256;
        ex_tensor **a = realloc(k->amax, (size_t)cap * sizeof *a);
        if (!a) {
            ex_ctx_set_error(k->ctx, EX_ERR_NOMEM, "quantize: out of host memory");
            return;
        }
        k->amax = a;
        k->cap_v = cap;
    }
    unsigned all = (1u << ex_tensor_ndim(v)) - 1;
    k->amax[k->nv++] = ex_keep(k->ctx, ex_max(k->ctx, v, all));
    k->amax[k->nv++] = ex_keep(k->ctx, ex_max(k->ctx, ex_scale(k->ctx, v, -1.0f), all));
}

static nas_val cal_conv(void *u, nas_val xv, const nas_conv_desc *c)
{
    cal *k = cal_of(u);
    float *w = NULL, *bias = NULL;
    if (cal_failed(k))
        return xv;
    if (nas_fold(k->net, c, &w, &bias) != EX_OK) {
        ex_ctx_set_error(k->ctx, EX_ERR_STATE, "quantize: %s", ex_network_error(k->net));
        return xv;
    }
    int64_t ne[4], fne[4] = {c->cout, c->cin / c->group, c->kh, c->kw}, one[4] = {1, c->cout, 1, 1};
    int nd = weight_shape(c, ne);
    file_weights(k, c->weight, w, 4, fne);
    char bname[200];
    snprintf(bname, sizeof bname, "%s.bias", c->weight);
    float *fb = malloc((size_t)c->cout * sizeof *fb);
    if (fb)
        memcpy(fb, bias, (size_t)c->cout * sizeof *fb);
    file_add(k, bname, EX_ST_F32, 1, &c->cout, fb);
    ex_tensor *tw = constant(k->ctx, &k->up, EX_F32, nd, ne, w, c->weight);
    ex_tensor *tb = constant(k->ctx, &k->up, EX_F32, 4, one, bias, bname);
    ex_tensor *y = ex_add(k->ctx, conv_node(k->ctx, xv.p, tw, NULL, NULL, c, false), tb);
    calibrate(k, y);
    return (nas_val){y, c->cout};
}

static nas_val cal_relu(void *u, nas_val x)
{
    return (nas_val){ex_relu(cal_of(u)->ctx, x.p), x.c};
}

static nas_val cal_add(void *u, nas_val a, nas_val b)
{
    cal *k = cal_of(u);
    ex_tensor *y = ex_add(k->ctx, a.p, b.p);
    calibrate(k, y);
    return (nas_val){y, a.c};
}

/* Channel concatenation of f32 parts (by ex_copy_into, as nas_concat). */
static nas_val cal_concat(void *u, int n, const nas_val *parts)
{
    ex_ctx *ctx = cal_of(u)->ctx;
    ex_tensor *p0 = parts[0].p;
    int64_t ne[4] = {ex_tensor_dim(p0, 0), 0, ex_tensor_dim(p0, 2), ex_tensor_dim(p0, 3)}, at = 0;
    for (int i = 0; i < n; i++)
        ne[1] += parts[i].c;
    ex_tensor *cat = ex_fill(ctx, 4, ne, 0.0f);
    for (int i = 0; i < n; i++) {
        ex_copy_into(ctx, parts[i].p, ex_slice(ctx, cat, 1, at, parts[i].c));
        at += parts[i].c;
    }
    return (nas_val){cat, ne[1]};
}

static ex_tensor *shift_view(ex_ctx *ctx, ex_tensor *x)
{
    int64_t h = ex_tensor_dim(x, 2), w = ex_tensor_dim(x, 3);
    return ex_slice(ctx, ex_slice(ctx, x, 2, 1, h - 1), 3, 1, w - 1);
}

static nas_val cal_shift(void *u, nas_val x)
{
    return (nas_val){shift_view(cal_of(u)->ctx, x.p), x.c};
}

static nas_val cal_pool(void *u, nas_val x, bool max, int stride)
{
    ex_ctx *ctx = cal_of(u)->ctx;
    ex_pool_params p = {{3, 3}, {stride, stride}, {1, 1}};
    return (nas_val){max ? ex_max_pool(ctx, x.p, &p) : ex_avg_pool(ctx, x.p, &p), x.c};
}

/* The classifier's weights go to the file; nothing after its input is calibrated. */
static nas_val cal_classifier(void *u, nas_val x, int64_t classes)
{
    cal *k = cal_of(u);
    int64_t ne[2] = {classes, x.c};
    float *w = nas_weights(k->net, "classifier.weight", classes * x.c),
          *b = nas_weights(k->net, "classifier.bias", classes);
    if (!w || !b) {
        ex_ctx_set_error(k->ctx, EX_ERR_STATE, "quantize: %s", ex_network_error(k->net));
        free(w);
        free(b);
        return x;
    }
    file_weights(k, "classifier.weight", w, 2, ne);
    free(w);
    file_add(k, "classifier.bias", EX_ST_F32, 1, &classes, b);
    return x;
}

/* The largest divisor of count up to 64: the calibration batch. */
static int64_t cal_batch(int64_t count)
{
    for (int64_t b = count < 64 ? count : 64; b > 1; b--)
        if (count % b == 0)
            return b;
    return 1;
}

/* Normalizes count images of pixels as the network's input says. */
static void normalize(const ex_network_config *c, const float *pixels, int64_t count, float *x)
{
    size_t plane = (size_t)c->height * (size_t)c->width, img = plane * (size_t)c->in_channels;
    for (size_t i = 0; i < (size_t)count * img; i++) {
        int ch = (int)(i / plane % (size_t)c->in_channels);
        x[i] = c->input.enabled ? (pixels[i] - c->input.mean[ch]) / c->input.std[ch] : pixels[i];
    }
}

/* Runs the calibration pass over the images; scale[v] = max |v| / 127. */
static ex_status cal_run(cal *k, ex_plan *plan, ex_tensor *x, const float *pixels, int64_t count,
                         int64_t batch, float *scale)
{
    const ex_network_config *c = nas_network_config(k->net);
    size_t img = (size_t)c->in_channels * (size_t)c->height * (size_t)c->width;
    float *xb = malloc(img * (size_t)batch * sizeof *xb);
    int nv = k->nv / 2;
    double *amax = calloc((size_t)nv + 1, sizeof *amax);
    ex_status st = xb && amax ? nas_qbuild_write(&k->up, plan) : EX_ERR_NOMEM;
    for (int64_t at = 0; st == EX_OK && at < count; at += batch) {
        normalize(c, pixels + (size_t)at * img, batch, xb);
        st = ex_plan_write(plan, x, xb, img * (size_t)batch * sizeof *xb);
        if (st == EX_OK)
            st = ex_plan_run(plan);
        for (int v = 0; st == EX_OK && v < 2 * nv; v++) {
            float m = 0;
            st = ex_plan_read(plan, k->amax[v], &m, sizeof m);
            amax[v / 2] = fmax(amax[v / 2], (double)m);
        }
    }
    for (int v = 0; st == EX_OK && v < nv; v++) {
        if (!isfinite(amax[v])) {
            st = EX_ERR_NONFINITE;
            break;
        }
        scale[v] = amax[v] > 0 ? (float)(amax[v] / 127.0) : 1.0f;
    }
    free(xb);
    free(amax);
    return st;
}

static ex_status save(cal *k, const float *scale, int64_t count, const char *path)
{
    ex_network *n = k->net;
    int64_t nv = k->nv / 2;
    float *s = malloc((size_t)nv * sizeof *s + 1);
    if (s)
        memcpy(s, scale, (size_t)nv * sizeof *s);
    file_add(k, ACT_SCALES, EX_ST_F32, 1, &nv, s);
    if (ex_ctx_status(k->ctx) != EX_OK)
        return nas_network_fail(n, ex_ctx_status(k->ctx), ex_ctx_error(k->ctx));
    char genotype[2048], *arch = nas_network_architecture(n), q[256];
    ex_genotype_format(nas_network_genotype(n), genotype, sizeof genotype);
    snprintf(q, sizeof q,
             "{\"weights\":\"int8, symmetric, per output channel\",\"activations\":\"int8, "
             "symmetric, per tensor\",\"calibration_images\":%lld}",
             (long long)count);
    if (!arch)
        return nas_network_fail(n, EX_ERR_NOMEM, "quantize: out of host memory");
    ex_st_meta meta[4] = {{"format", "exapt-network"},
                          {"genotype", genotype},
                          {"network", arch},
                          {NAS_QUANT_META, q}};
    char msg[512] = "";
    ex_status st = ex_safetensors_save(path, k->file, (size_t)k->nfile, meta, 4, msg, sizeof msg);
    free(arch);
    return st == EX_OK ? EX_OK : nas_network_fail(n, st, msg);
}

static void cal_free(cal *k)
{
    nas_qbuild_free(&k->up);
    for (int i = 0; i < k->nfile; i++) {
        free((void *)k->file[i].name);
        free((void *)k->file[i].data);
    }
    free(k->file);
    free(k->amax);
    ex_ctx_free(k->ctx);
}

ex_status ex_network_quantize(ex_network *n, const float *pixels, int64_t count, const char *path)
{
    if (!n)
        return EX_ERR_ARG;
    if (!pixels || count < 1 || !path)
        return nas_network_fail(n, EX_ERR_ARG,
                                "quantize: needs calibration images (at least 1) and a path");
    if (nas_network_is_int8(n))
        return nas_network_fail(n, EX_ERR_STATE, "quantize: the network is int8 already");
    const ex_network_config *c = nas_network_config(n);
    int64_t batch = cal_batch(count);
    cal k = {.net = n, .ctx = ex_ctx_new()};
    if (!k.ctx)
        return nas_network_fail(n, EX_ERR_NOMEM, "quantize: out of host memory");
    int64_t xs[4] = {batch, c->in_channels, c->height, c->width};
    ex_tensor *x = ex_input(k.ctx, EX_F32, 4, xs, "x");
    calibrate(&k, x);
    nas_walker w = {&k,        cal_conv, cal_relu,       cal_add,   cal_concat,
                    cal_shift, cal_pool, cal_classifier, cal_failed};
    nas_walk(&w, nas_network_genotype(n), c, (nas_val){x, c->in_channels});
    ex_plan *plan = NULL;
    ex_status st = ex_ctx_status(k.ctx);
    if (st == EX_OK && (st = ex_graph_plan(k.ctx, nas_network_backend(n), NULL, &plan)) != EX_OK)
        nas_network_fail(n, st, ex_ctx_error(k.ctx));
    float *scale = st == EX_OK ? calloc((size_t)k.nv / 2 + 1, sizeof *scale) : NULL;
    if (st == EX_OK && !scale)
        st = nas_network_fail(n, EX_ERR_NOMEM, "quantize: out of host memory");
    if (st == EX_OK && (st = cal_run(&k, plan, x, pixels, count, batch, scale)) != EX_OK)
        nas_network_fail(n, st,
                         st == EX_ERR_NONFINITE ? "quantize: an activation is not finite"
                                                : ex_plan_error(plan));
    if (st == EX_OK)
        st = save(&k, scale, count, path);
    free(scale);
    ex_plan_free(plan);
    cal_free(&k);
    return st;
}

/* ---- the int8 pass ---- */

/* A value of the int8 pass: its tensor and scale, and its ReLU once made (DARTS's
 * operations each begin with one, so a state that feeds several takes one pass). */
typedef struct qv {
    ex_tensor *t;
    float scale;
    struct qv *relu;
} qv;

typedef struct qb {
    ex_ctx *ctx;
    const ex_safetensors *f;
    nas_qbuild *out;
    float *scales; /* activation_scales */
    int64_t nscales, next;
    qv **vals; /* every value made, freed at the end */
    int nvals, cap_vals;
} qb;

static qb *qb_of(void *u)
{
    return u;
}

static bool qb_failed(void *u)
{
    return ex_ctx_status(qb_of(u)->ctx) != EX_OK;
}

static nas_val qval(qb *b, ex_tensor *t, float scale, int64_t c)
{
    qv *v = malloc(sizeof *v);
    if (b->nvals == b->cap_vals) {
        int cap = b->cap_vals ? 2 * b->cap_vals : 256;
        qv **a = realloc(b->vals, (size_t)cap * sizeof *a);
        if (a) {
            b->vals = a;
            b->cap_vals = cap;
        }
    }
    if (!v || b->nvals == b->cap_vals) {
        free(v);
        ex_ctx_set_error(b->ctx, EX_ERR_NOMEM, "int8 network: out of host memory");
        return (nas_val){NULL, c};
    }
    *v = (qv){t, scale, NULL};
    b->vals[b->nvals++] = v;
    return (nas_val){v, c};
}

static qv *qv_of(nas_val v)
{
    return v.p;
}

/* The next calibrated value's scale. */
static float next_scale(qb *b)
{
    if (b->next < b->nscales)
        return b->scales[b->next++];
    ex_ctx_set_error(b->ctx, EX_ERR_FORMAT,
                     "int8 network: %s holds %lld scales, fewer than the "
                     "network has values",
                     ACT_SCALES, (long long)b->nscales);
    return 1.0f;
}

/* The file's tensor called name, of dtype dt and shape ne, in a new buffer; NULL with the
 * context's error set otherwise. */
static void *read_tensor(qb *b, const char *name, ex_st_dtype dt, int nd, const int64_t *ne)
{
    ex_st_info info;
    char m[256];
    if (ex_safetensors_info(b->f, name, &info, m, sizeof m) != EX_OK) {
        ex_ctx_set_error(b->ctx, EX_ERR_FORMAT, "int8 network: no tensor %s", name);
        return NULL;
    }
    bool fits = info.dtype == dt && info.ndim == nd;
    for (int i = 0; fits && i < nd; i++)
        fits = info.shape[i] == ne[i];
    if (!fits) {
        ex_ctx_set_error(b->ctx, EX_ERR_FORMAT,
                         "int8 network: %s is not %s of the shape the network needs", name,
                         ex_st_dtype_name(dt));
        return NULL;
    }
    void *v = malloc((size_t)info.nbytes + 1);
    if (!v || ex_safetensors_read(b->f, name, v, info.nbytes, m, sizeof m) != EX_OK) {
        ex_ctx_set_error(b->ctx, v ? EX_ERR_FORMAT : EX_ERR_NOMEM, "int8 network: %s: %s", name,
                         v ? m : "out of host memory");
        free(v);
        return NULL;
    }
    return v;
}

/* Whether every scale is finite and positive (error set otherwise). */
static bool scales_ok(qb *b, const char *name, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(isfinite(s[i]) && s[i] > 0)) {
            ex_ctx_set_error(b->ctx, EX_ERR_FORMAT,
                             "int8 network: %s holds %g, not a positive finite scale", name,
                             (double)s[i]);
            return false;
        }
    return true;
}

/* The int8 weights name and their scales; the bias (f32, name given) as the int32 bias at
 * input scale sx, and the per-channel product sx * s_w into *sw. NULL tensors on failure. */
static bool q_weights(qb *b, const char *name, int nd, const int64_t *ne, int node_nd,
                      const int64_t *node_ne, const char *bias_name, float sx, ex_tensor **w,
                      ex_tensor **bias, double **sw)
{
    char sname[200];
    snprintf(sname, sizeof sname, "%s.scale", name);
    int8_t *wq = read_tensor(b, name, EX_ST_I8, nd, ne);
    float *s = read_tensor(b, sname, EX_ST_F32, 1, ne);
    float *fb = read_tensor(b, bias_name, EX_ST_F32, 1, ne);
    int32_t *bq = malloc((size_t)ne[0] * sizeof *bq);
    *sw = malloc((size_t)ne[0] * sizeof **sw);
    bool ok = wq && s && fb && bq && *sw && scales_ok(b, sname, s, ne[0]);
    for (int64_t o = 0; ok && o < ne[0]; o++) {
        (*sw)[o] = (double)sx * (double)s[o];
        double v = nearbyint((double)fb[o] / (*sw)[o]);
        if (!isfinite(v)) {
            ex_ctx_set_error(b->ctx, EX_ERR_FORMAT, "int8 network: %s is not finite", bias_name);
            ok = false;
            break;
        }
        bq[o] = (int32_t)(v < -1073741823.0 ? -1073741823.0 : v > 1073741823.0 ? 1073741823.0 : v);
    }
    free(s);
    free(fb);
    if (!ok) {
        if (ex_ctx_status(b->ctx) == EX_OK)
            ex_ctx_set_error(b->ctx, EX_ERR_NOMEM, "int8 network: out of host memory");
        free(wq);
        free(bq);
        free(*sw);
        *sw = NULL;
        return false;
    }
    *w = constant(b->ctx, b->out, EX_I8, node_nd, node_ne, wq, name);
    *bias = constant(b->ctx, b->out, EX_I32, 1, ne, bq, bias_name);
    return ex_ctx_status(b->ctx) == EX_OK;
}

static nas_val qb_conv(void *u, nas_val xv, const nas_conv_desc *c)
{
    qb *b = qb_of(u);
    if (qb_failed(b))
        return xv;
    qv *x = qv_of(xv);
    int64_t ne[4], fne[4] = {c->cout, c->cin / c->group, c->kh, c->kw};
    int nd = weight_shape(c, ne);
    char bname[200];
    snprintf(bname, sizeof bname, "%s.bias", c->weight);
    ex_tensor *w, *bias;
    double *sw = NULL;
    if (!q_weights(b, c->weight, 4, fne, nd, ne, bname, x->scale, &w, &bias, &sw))
        return xv;
    float sy = next_scale(b), *m = malloc((size_t)c->cout * sizeof *m);
    for (int64_t o = 0; m && o < c->cout; o++)
        m[o] = (float)(sw[o] / (double)sy);
    free(sw);
    char mname[200];
    snprintf(mname, sizeof mname, "%s.multiplier", c->weight);
    ex_tensor *tm = constant(b->ctx, b->out, EX_F32, 1, &c->cout, m, mname);
    /* a value read only through its ReLU is made with it: the requantize's lower bound 0
     * gives relu(clamp(rne(v), -127, 127)) byte for byte (NaN to 0 both ways), no pass */
    nas_val y = qval(b, conv_node(b->ctx, x->t, w, bias, tm, c, c->relu_only), sy, c->cout);
    if (c->relu_only && y.p)
        qv_of(y)->relu = qv_of(y);
    return y;
}

static nas_val qb_relu(void *u, nas_val x)
{
    qb *b = qb_of(u);
    if (qb_failed(b))
        return x;
    qv *v = qv_of(x);
    if (!v->relu) {
        nas_val r = qval(b, ex_qrelu(b->ctx, v->t), v->scale, x.c);
        v->relu = r.p;
        return r;
    }
    return (nas_val){v->relu, x.c};
}

static nas_val qb_add(void *u, nas_val a, nas_val c)
{
    qb *b = qb_of(u);
    if (qb_failed(b))
        return a;
    float sy = next_scale(b), sa = qv_of(a)->scale, sc = qv_of(c)->scale;
    ex_tensor *y = ex_qadd(b->ctx, qv_of(a)->t, (float)((double)sa / sy), qv_of(c)->t,
                           (float)((double)sc / sy), false);
    return qval(b, y, sy, a.c);
}

static nas_val qb_concat(void *u, int n, const nas_val *parts)
{
    qb *b = qb_of(u);
    if (qb_failed(b))
        return parts[0];
    ex_tensor *t[EX_MAX_QCONCAT];
    float s = 0, *m = malloc((size_t)n * sizeof *m);
    int64_t c = 0, nn = n;
    for (int i = 0; i < n; i++) {
        s = fmaxf(s, qv_of(parts[i])->scale);
        t[i] = qv_of(parts[i])->t;
        c += parts[i].c;
    }
    for (int i = 0; m && i < n; i++)
        m[i] = (float)((double)qv_of(parts[i])->scale / s);
    ex_tensor *tm = constant(b->ctx, b->out, EX_F32, 1, &nn, m, "concat.multipliers");
    return qval(b, ex_qconcat(b->ctx, n, t, tm), s, c);
}

static nas_val qb_shift(void *u, nas_val x)
{
    qb *b = qb_of(u);
    if (qb_failed(b))
        return x;
    return qval(b, shift_view(b->ctx, qv_of(x)->t), qv_of(x)->scale, x.c);
}

static nas_val qb_pool(void *u, nas_val x, bool max, int stride)
{
    qb *b = qb_of(u);
    if (qb_failed(b))
        return x;
    ex_pool_params p = {{3, 3}, {stride, stride}, {1, 1}};
    ex_tensor *t = qv_of(x)->t;
    return qval(b, max ? ex_qmax_pool(b->ctx, t, &p) : ex_qavg_pool(b->ctx, t, &p), qv_of(x)->scale,
                x.c);
}

/* Global average pooling, the int8 linear layer, and the logits dequantized to f32. */
static nas_val qb_classifier(void *u, nas_val xv, int64_t classes)
{
    qb *b = qb_of(u);
    if (qb_failed(b))
        return xv;
    qv *x = qv_of(xv);
    ex_tensor *g = ex_qglobal_avg_pool(b->ctx, x->t);
    int64_t flat[2] = {ex_tensor_dim(g, 0), xv.c}, ne[2] = {classes, xv.c};
    ex_tensor *w, *bias;
    double *sw = NULL;
    if (!q_weights(b, "classifier.weight", 2, ne, 2, ne, "classifier.bias", x->scale, &w, &bias,
                   &sw))
        return xv;
    float *s = malloc((size_t)classes * sizeof *s);
    for (int64_t o = 0; s && o < classes; o++)
        s[o] = (float)sw[o];
    free(sw);
    ex_tensor *ts = constant(b->ctx, b->out, EX_F32, 1, &classes, s, "classifier.dequantize");
    ex_tensor *acc = ex_qlinear(b->ctx, ex_reshape(b->ctx, g, 2, flat), w, bias);
    return qval(b, ex_dequantize(b->ctx, acc, ts), 1.0f, classes);
}

ex_tensor *nas_quant_forward(ex_ctx *ctx, const ex_safetensors *f, const ex_genotype *g,
                             const ex_network_config *c, ex_tensor *x, nas_qbuild *out)
{
    qb b = {.ctx = ctx, .f = f, .out = out};
    ex_st_info info;
    if (ex_safetensors_info(f, ACT_SCALES, &info, NULL, 0) != EX_OK || info.dtype != EX_ST_F32 ||
        info.ndim != 1 || info.shape[0] < 1) {
        ex_ctx_set_error(ctx, EX_ERR_FORMAT, "int8 network: no %s (f32 [n]) in the file",
                         ACT_SCALES);
        return &ctx->inert;
    }
    b.nscales = info.shape[0];
    b.scales = read_tensor(&b, ACT_SCALES, EX_ST_F32, 1, &b.nscales);
    ex_tensor *logits = &ctx->inert;
    if (b.scales && scales_ok(&b, ACT_SCALES, b.scales, b.nscales)) {
        float sx = next_scale(&b), *inv = malloc(sizeof *inv);
        if (inv)
            *inv = 1.0f / sx;
        int64_t one = 1;
        ex_tensor *q = ex_quantize(ctx, x, constant(ctx, out, EX_F32, 1, &one, inv, "input.scale"));
        nas_walker w = {&b,       qb_conv, qb_relu,       qb_add,   qb_concat,
                        qb_shift, qb_pool, qb_classifier, qb_failed};
        nas_val y = nas_walk(&w, g, c, qval(&b, q, sx, c->in_channels));
        if (ex_ctx_status(ctx) == EX_OK && b.next != b.nscales)
            ex_ctx_set_error(ctx, EX_ERR_FORMAT,
                             "int8 network: %s holds %lld scales, the network has %lld values",
                             ACT_SCALES, (long long)b.nscales, (long long)b.next);
        if (ex_ctx_status(ctx) == EX_OK)
            logits = qv_of(y)->t;
    }
    free(b.scales);
    for (int i = 0; i < b.nvals; i++)
        free(b.vals[i]);
    free(b.vals);
    return logits;
}
