/* The derived network as an ONNX model (opset 13), written with protobuf-c from the
 * onnx.proto that Debian's libonnx-dev ships. The graph follows nas_derived_forward's
 * structure in evaluation mode (no auxiliary head, no drop path); every batch norm follows
 * a convolution and is folded into it: W' = W s, b' = beta - mean s, s = gamma /
 * sqrt(var + eps), in double. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/file.h"
#include "nas/export.h"
#include "nas/supernet.h"
#include "onnx/onnx.pb-c.h"

enum { OPSET = 13, IR_VERSION = 7 };

/* Everything the model's messages point to, freed at once. */
typedef struct arena_block {
    struct arena_block *next;
    max_align_t data[];
} arena_block;

typedef struct ob {
    ex_network *net;
    arena_block *blocks;
    Onnx__GraphProto graph;
    size_t cap_node, cap_init;
    int values;
    ex_status st;
    char msg[512];
} ob;

/* A value of the graph: its name and channel count. */
typedef struct val {
    const char *name;
    int64_t c;
} val;

static void *take(ob *b, size_t bytes)
{
    arena_block *a = b->st == EX_OK ? calloc(1, sizeof *a + bytes) : NULL;
    if (!a) {
        if (b->st == EX_OK)
            snprintf(b->msg, sizeof b->msg, "onnx: out of host memory");
        b->st = b->st == EX_OK ? EX_ERR_NOMEM : b->st;
        return NULL;
    }
    a->next = b->blocks;
    b->blocks = a;
    return a->data;
}

__attribute__((format(printf, 2, 3))) static char *text(ob *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = take(b, (size_t)n + 1);
    if (s) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* Appends p to the array *v of *n entries and capacity *cap. */
static void push(ob *b, void ***v, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        void **grown = take(b, nc * sizeof *grown);
        if (!grown)
            return;
        if (*n)
            memcpy(grown, *v, *n * sizeof *grown);
        *v = grown;
        *cap = nc;
    }
    (*v)[(*n)++] = p;
}

static Onnx__NodeProto *node(ob *b, const char *op, int nin, const char *const *in, val *out)
{
    Onnx__NodeProto *nd = take(b, sizeof *nd);
    char **ins = take(b, (size_t)nin * sizeof *ins), **outs = take(b, sizeof *outs);
    out->name = text(b, "v%d", b->values++);
    if (!nd || !ins || !outs || !out->name)
        return NULL;
    onnx__node_proto__init(nd);
    for (int i = 0; i < nin; i++)
        ins[i] = (char *)in[i];
    outs[0] = (char *)out->name;
    nd->op_type = (char *)op;
    nd->n_input = (size_t)nin;
    nd->input = ins;
    nd->n_output = 1;
    nd->output = outs;
    push(b, (void ***)&b->graph.node, &b->graph.n_node, &b->cap_node, nd);
    return nd;
}

static void attr(ob *b, Onnx__NodeProto *nd, const char *name, int n, const int64_t *ints,
                 bool list)
{
    Onnx__AttributeProto *a = take(b, sizeof *a),
                         **all = nd ? take(b, (nd->n_attribute + 1) * sizeof *all) : NULL;
    int64_t *v = take(b, (size_t)n * sizeof *v);
    if (!a || !all || !v)
        return;
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    memcpy(v, ints, (size_t)n * sizeof *v);
    if (list) {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        a->n_ints = (size_t)n;
        a->ints = v;
    } else {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a->has_i = 1;
        a->i = ints[0];
    }
    if (nd->n_attribute)
        memcpy(all, nd->attribute, nd->n_attribute * sizeof *all);
    all[nd->n_attribute++] = a;
    nd->attribute = all;
}

static void attr_int(ob *b, Onnx__NodeProto *nd, const char *name, int64_t v)
{
    attr(b, nd, name, 1, &v, false);
}

static void attr_ints(ob *b, Onnx__NodeProto *nd, const char *name, int n, const int64_t *v)
{
    attr(b, nd, name, n, v, true);
}

/* A constant of the model (float32, or int64 for Slice's operands). */
static const char *constant(ob *b, int ndim, const int64_t *dims, const void *data, bool i64)
{
    Onnx__TensorProto *t = take(b, sizeof *t);
    int64_t *d = take(b, (size_t)ndim * sizeof *d + 1), count = 1;
    for (int i = 0; i < ndim; i++)
        count *= dims[i];
    size_t bytes = (size_t)count * (i64 ? 8 : 4);
    uint8_t *raw = take(b, bytes + 1);
    char *name = text(b, "c%d", b->values++);
    if (!t || !d || !raw || !name)
        return "";
    onnx__tensor_proto__init(t);
    memcpy(d, dims, (size_t)ndim * sizeof *d);
    memcpy(raw, data, bytes); /* raw_data is little-endian, as this host */
    t->n_dims = (size_t)ndim;
    t->dims = d;
    t->has_data_type = 1;
    t->data_type =
        i64 ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64 : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->name = name;
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = raw;
    push(b, (void ***)&b->graph.initializer, &b->graph.n_initializer, &b->cap_init, t);
    return name;
}

/* The network's tensor called prefix.name, which must hold count values; NULL on failure. */
static float *weights(ob *b, const char *prefix, const char *name, int64_t count)
{
    if (b->st != EX_OK)
        return NULL;
    char full[256];
    snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", name);
    int64_t got = 0;
    float *v = nas_network_read(b->net, full, &got);
    if (v && got == count)
        return v;
    b->st = EX_ERR_STATE;
    if (v)
        snprintf(b->msg, sizeof b->msg, "onnx: %s holds %lld values, not %lld", full,
                 (long long)got, (long long)count);
    else
        snprintf(b->msg, sizeof b->msg, "onnx: %s", ex_network_error(b->net));
    free(v);
    return NULL;
}

typedef struct conv_shape {
    int64_t cout, cin, kh, kw;
    int sh, sw, ph, pw, dil, group;
} conv_shape;

/* The batch norm folded into a convolution: at prefix, of channels channels, of which
 * the convolution makes [first, first + cout). */
typedef struct bn_part {
    const char *prefix;
    int64_t channels, first;
} bn_part;

/* Scales each output channel's weights in w by the batch norm's factor and sets the bias. */
static void fold(ob *b, const bn_part *bn, const conv_shape *s, float *w, float *bias)
{
    int64_t per = s->cin / s->group * s->kh * s->kw;
    float *g = weights(b, bn->prefix, "weight", bn->channels),
          *beta = weights(b, bn->prefix, "bias", bn->channels),
          *mean = weights(b, bn->prefix, "running_mean", bn->channels),
          *var = weights(b, bn->prefix, "running_var", bn->channels);
    for (int64_t o = 0; g && beta && mean && var && o < s->cout; o++) {
        int64_t k = bn->first + o;
        double scale = (double)g[k] / sqrt((double)var[k] + 1e-5);
        for (int64_t i = 0; i < per; i++)
            w[o * per + i] = (float)((double)w[o * per + i] * scale);
        bias[o] = (float)((double)beta[k] - (double)mean[k] * scale);
    }
    free(g);
    free(beta);
    free(mean);
    free(var);
}

/* A convolution (weights at prefix.wname) with the batch norm bn (NULL: none, no bias)
 * folded in. */
static val conv(ob *b, val x, const char *prefix, const char *wname, const bn_part *bn,
                const conv_shape *s)
{
    val y = {"", s->cout};
    int64_t dims[4] = {s->cout, s->cin / s->group, s->kh, s->kw};
    float *w = weights(b, prefix, wname, dims[0] * dims[1] * dims[2] * dims[3]);
    float *bias = calloc((size_t)s->cout, sizeof *bias);
    if (w && bias) {
        if (bn)
            fold(b, bn, s, w, bias);
        const char *in[3] = {x.name, constant(b, 4, dims, w, false),
                             bn ? constant(b, 1, &s->cout, bias, false) : NULL};
        Onnx__NodeProto *nd = node(b, "Conv", bn ? 3 : 2, in, &y);
        int64_t k[2] = {s->kh, s->kw}, st[2] = {s->sh, s->sw},
                pad[4] = {s->ph, s->pw, s->ph, s->pw}, dl[2] = {s->dil, s->dil};
        if (nd) {
            attr_ints(b, nd, "kernel_shape", 2, k);
            attr_ints(b, nd, "strides", 2, st);
            attr_ints(b, nd, "pads", 4, pad);
            attr_ints(b, nd, "dilations", 2, dl);
            attr_int(b, nd, "group", s->group);
        }
    } else if (b->st == EX_OK) {
        b->st = EX_ERR_NOMEM;
        snprintf(b->msg, sizeof b->msg, "onnx: out of host memory");
    }
    free(w);
    free(bias);
    return y;
}

/* The batch norm at prefix over a whole convolution's cout channels. */
static const bn_part *whole(bn_part *part, const char *prefix, int64_t cout)
{
    *part = (bn_part){prefix, cout, 0};
    return prefix ? part : NULL;
}

static val unary(ob *b, const char *op, val x)
{
    val y = {"", x.c};
    node(b, op, 1, &x.name, &y);
    return y;
}

static val binary(ob *b, const char *op, val x, val z)
{
    val y = {"", x.c};
    const char *in[2] = {x.name, z.name};
    node(b, op, 2, in, &y);
    return y;
}

static val concat(ob *b, int count, const val *parts)
{
    const char *in[2 + EX_MAX_STEPS];
    val y = {"", 0};
    for (int i = 0; i < count; i++) {
        in[i] = parts[i].name;
        y.c += parts[i].c;
    }
    attr_int(b, node(b, "Concat", count, in, &y), "axis", 1);
    return y;
}

static conv_shape pointwise(int64_t cin, int64_t cout, int stride)
{
    return (conv_shape){cout, cin, 1, 1, stride, stride, 0, 0, 1, 1};
}

/* DARTS's FactorizedReduce: two 1x1 convolutions at stride 2, the second on the input
 * shifted by one pixel, concatenated, then the batch norm. */
static val factorized_reduce(ob *b, val x, const char *prefix, int64_t cout)
{
    val r = unary(b, "Relu", x);
    int64_t starts[2] = {1, 1}, ends[2] = {INT64_MAX, INT64_MAX}, axes[2] = {2, 3}, two = 2;
    const char *in[4] = {r.name, constant(b, 1, &two, starts, true),
                         constant(b, 1, &two, ends, true), constant(b, 1, &two, axes, true)};
    val shifted = {"", x.c};
    node(b, "Slice", 4, in, &shifted);
    conv_shape s = pointwise(x.c, cout / 2, 2);
    char *bn = text(b, "%s.bn", prefix);
    bn_part first = {bn, cout, 0}, second = {bn, cout, cout / 2};
    val parts[2] = {conv(b, r, prefix, "conv_1.weight", bn ? &first : NULL, &s),
                    conv(b, shifted, prefix, "conv_2.weight", bn ? &second : NULL, &s)};
    return concat(b, 2, parts);
}

/* ReLU, convolution, batch norm (DARTS's ReLUConvBN) of a cell's preprocessing. */
static val relu_conv_bn(ob *b, val x, const char *prefix, int64_t cout)
{
    conv_shape s = pointwise(x.c, cout, 1);
    bn_part bn;
    return conv(b, unary(b, "Relu", x), prefix, "op.1.weight",
                whole(&bn, text(b, "%s.op.2", prefix), cout), &s);
}

static val depthwise(ob *b, val x, const char *prefix, const char *name, int k, int stride, int pad,
                     int dil)
{
    conv_shape s = {x.c, x.c, k, k, stride, stride, pad, pad, dil, (int)x.c};
    return conv(b, unary(b, "Relu", x), prefix, name, NULL, &s);
}

static val sep_conv(ob *b, val x, const char *p, int k, int stride)
{
    conv_shape s = pointwise(x.c, x.c, 1);
    bn_part bn;
    val y = depthwise(b, x, p, "op.1.weight", k, stride, k / 2, 1);
    y = conv(b, y, p, "op.2.weight", whole(&bn, text(b, "%s.op.3", p), x.c), &s);
    y = depthwise(b, y, p, "op.5.weight", k, 1, k / 2, 1);
    return conv(b, y, p, "op.6.weight", whole(&bn, text(b, "%s.op.7", p), x.c), &s);
}

static val dil_conv(ob *b, val x, const char *p, int k, int stride)
{
    conv_shape s = pointwise(x.c, x.c, 1);
    bn_part bn;
    val y = depthwise(b, x, p, "op.1.weight", k, stride, k - 1, 2);
    return conv(b, y, p, "op.2.weight", whole(&bn, text(b, "%s.op.3", p), x.c), &s);
}

static val conv_7x1_1x7(ob *b, val x, const char *p, int stride)
{
    conv_shape a = {x.c, x.c, 1, 7, 1, stride, 0, 3, 1, 1},
               c = {x.c, x.c, 7, 1, stride, 1, 3, 0, 1, 1};
    bn_part bn;
    val y = conv(b, unary(b, "Relu", x), p, "op.1.weight", NULL, &a);
    return conv(b, y, p, "op.2.weight", whole(&bn, text(b, "%s.op.3", p), x.c), &c);
}

static val pool(ob *b, ex_cand op, val x, int stride)
{
    val y = {"", x.c};
    bool max = op == EX_CAND_MAX_POOL_3X3;
    Onnx__NodeProto *nd = node(b, max ? "MaxPool" : "AveragePool", 1, &x.name, &y);
    int64_t k[2] = {3, 3}, st[2] = {stride, stride}, pad[4] = {1, 1, 1, 1};
    if (!nd)
        return y;
    attr_ints(b, nd, "kernel_shape", 2, k);
    attr_ints(b, nd, "strides", 2, st);
    attr_ints(b, nd, "pads", 4, pad);
    if (!max)
        attr_int(b, nd, "count_include_pad", 0); /* DARTS's count_include_pad=False */
    return y;
}

static val candidate(ob *b, ex_cand op, val x, const char *p, int stride)
{
    switch (op) {
    case EX_CAND_MAX_POOL_3X3:
    case EX_CAND_AVG_POOL_3X3: return pool(b, op, x, stride);
    case EX_CAND_SKIP_CONNECT: return stride == 1 ? x : factorized_reduce(b, x, p, x.c);
    case EX_CAND_SEP_CONV_3X3: return sep_conv(b, x, p, 3, stride);
    case EX_CAND_SEP_CONV_5X5: return sep_conv(b, x, p, 5, stride);
    case EX_CAND_SEP_CONV_7X7: return sep_conv(b, x, p, 7, stride);
    case EX_CAND_DIL_CONV_3X3: return dil_conv(b, x, p, 3, stride);
    case EX_CAND_DIL_CONV_5X5: return dil_conv(b, x, p, 5, stride);
    case EX_CAND_CONV_7X1_1X7: return conv_7x1_1x7(b, x, p, stride);
    case EX_CAND_NONE:
    case EX_CAND_COUNT: break;
    }
    if (b->st == EX_OK) {
        b->st = EX_ERR_ARG;
        snprintf(b->msg, sizeof b->msg, "onnx: operation %s has no ONNX form", ex_cand_name(op));
    }
    return x;
}

static val cell(ob *b, int i, val s0, val s1, int64_t c, bool reduction, bool reduction_prev)
{
    const ex_genotype *g = nas_network_genotype(b->net);
    const ex_genotype_edge *edges = reduction ? g->reduce : g->normal;
    const int *cat = reduction ? g->reduce_concat : g->normal_concat;
    int ncat = reduction ? g->n_reduce_concat : g->n_normal_concat;
    val st[2 + EX_MAX_STEPS];
    char *p0 = text(b, "cells.%d.preprocess0", i), *p1 = text(b, "cells.%d.preprocess1", i);
    if (!p0 || !p1)
        return s1;
    st[0] = reduction_prev ? factorized_reduce(b, s0, p0, c) : relu_conv_bn(b, s0, p0, c);
    st[1] = relu_conv_bn(b, s1, p1, c);
    for (int k = 0; k < g->steps; k++) {
        val h[2];
        for (int e = 0; e < 2; e++) {
            const ex_genotype_edge *ed = &edges[2 * k + e];
            int stride = reduction && ed->input < 2 ? 2 : 1;
            char *p = text(b, "cells.%d._ops.%d", i, 2 * k + e);
            h[e] = p ? candidate(b, ed->op, st[ed->input], p, stride) : s1;
        }
        st[2 + k] = binary(b, "Add", h[0], h[1]);
    }
    val parts[2 + EX_MAX_STEPS];
    for (int k = 0; k < ncat; k++)
        parts[k] = st[cat[k]];
    return concat(b, ncat, parts);
}

/* The classifier: global average pooling, flattening, and a linear layer. */
static val classifier(ob *b, val x, int64_t classes)
{
    val y = unary(b, "Flatten", unary(b, "GlobalAveragePool", x));
    int64_t dims[2] = {classes, x.c};
    float *w = weights(b, "classifier", "weight", classes * x.c),
          *bias = weights(b, "classifier", "bias", classes);
    val out = {"", classes};
    if (w && bias) {
        const char *in[3] = {y.name, constant(b, 2, dims, w, false),
                             constant(b, 1, &classes, bias, false)};
        Onnx__NodeProto *nd = node(b, "Gemm", 3, in, &out);
        attr_int(b, nd, "transB", 1);
        if (nd)
            nd->output[0] = (char *)(out.name = "logits");
    }
    free(w);
    free(bias);
    return out;
}

static val body(ob *b, val x)
{
    const ex_network_config *c = nas_network_config(b->net);
    int64_t cc = c->channels;
    conv_shape stem = {c->stem_multiplier * cc, x.c, 3, 3, 1, 1, 1, 1, 1, 1};
    bn_part bn = {"stem.1", stem.cout, 0};
    val s0 = conv(b, x, "stem", "0.weight", &bn, &stem), s1 = s0;
    bool reduction_prev = false;
    for (int i = 0; i < c->layers && b->st == EX_OK; i++) {
        bool reduction = nas_is_reduction(i, c->layers);
        cc *= reduction ? 2 : 1;
        val out = cell(b, i, s0, s1, cc, reduction, reduction_prev);
        s0 = s1;
        s1 = out;
        reduction_prev = reduction;
    }
    return classifier(b, s1, c->classes);
}

/* A float tensor's type with a named first dimension ("N", the batch) and fixed others. */
static Onnx__ValueInfoProto *io(ob *b, const char *name, int ndim, const int64_t *dims)
{
    Onnx__ValueInfoProto *v = take(b, sizeof *v);
    Onnx__TypeProto *t = take(b, sizeof *t);
    Onnx__TypeProto__Tensor *tt = take(b, sizeof *tt);
    Onnx__TensorShapeProto *sh = take(b, sizeof *sh);
    Onnx__TensorShapeProto__Dimension *d = take(b, (size_t)ndim * sizeof *d),
                                      **dp = take(b, (size_t)ndim * sizeof *dp);
    if (!v || !t || !tt || !sh || !d || !dp)
        return NULL;
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(t);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < ndim; i++) {
        onnx__tensor_shape_proto__dimension__init(&d[i]);
        if (i == 0) {
            d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d[i].dim_param = "N";
        } else {
            d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d[i].dim_value = dims[i];
        }
        dp[i] = &d[i];
    }
    sh->n_dim = (size_t)ndim;
    sh->dim = dp;
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = sh;
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->name = (char *)name;
    v->type = t;
    return v;
}

/* Packs the model around b's graph and writes it to path. */
static ex_status write_model(ob *b, const char *path, const char *output)
{
    const ex_network_config *c = nas_network_config(b->net);
    int64_t in_dims[4] = {0, c->in_channels, c->height, c->width}, out_dims[2] = {0, c->classes};
    Onnx__ValueInfoProto *in = io(b, "input", 4, in_dims), *out = io(b, output, 2, out_dims);
    Onnx__ModelProto model;
    Onnx__OperatorSetIdProto opset, *opsets[1] = {&opset};
    Onnx__StringStringEntryProto meta[3], *metas[3] = {&meta[0], &meta[1], &meta[2]};
    char genotype[EX_GENOTYPE_TEXT_MAX],
        mean[EX_DATA_MAX_CHANNELS * 16] = "", std[EX_DATA_MAX_CHANNELS * 16] = "";
    ex_genotype_format(nas_network_genotype(b->net), genotype, sizeof genotype);
    for (int i = 0; c->input.enabled && i < c->in_channels; i++) {
        size_t at = strlen(mean), as = strlen(std);
        snprintf(mean + at, sizeof mean - at, "%s%.9g", i ? "," : "", (double)c->input.mean[i]);
        snprintf(std + as, sizeof std - as, "%s%.9g", i ? "," : "", (double)c->input.std[i]);
    }
    if (b->st != EX_OK || !in || !out)
        return b->st != EX_OK ? b->st : EX_ERR_NOMEM;
    onnx__model_proto__init(&model);
    onnx__operator_set_id_proto__init(&opset);
    for (int i = 0; i < 3; i++)
        onnx__string_string_entry_proto__init(&meta[i]);
    opset.domain = "";
    opset.has_version = 1;
    opset.version = OPSET;
    meta[0] = (Onnx__StringStringEntryProto){meta[0].base, "genotype", genotype};
    meta[1] = (Onnx__StringStringEntryProto){meta[1].base, "input_mean", mean};
    meta[2] = (Onnx__StringStringEntryProto){meta[2].base, "input_std", std};
    b->graph.name = "exapt";
    b->graph.n_input = 1;
    b->graph.input = &in;
    b->graph.n_output = 1;
    b->graph.output = &out;
    model.has_ir_version = 1;
    model.ir_version = IR_VERSION;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = "exapt";
    model.producer_version = (char *)ex_version();
    model.graph = &b->graph;
    model.n_metadata_props = c->input.enabled ? 3 : 1;
    model.metadata_props = metas;
    size_t size = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = malloc(size + 1);
    if (!buf) {
        snprintf(b->msg, sizeof b->msg, "onnx: out of host memory for %zu bytes", size);
        return EX_ERR_NOMEM;
    }
    onnx__model_proto__pack(&model, buf);
    ex_status st = ex_file_write_atomic(path, buf, size, b->msg, sizeof b->msg);
    free(buf);
    return st;
}

ex_status ex_network_export_onnx(ex_network *n, const char *path)
{
    if (!n)
        return EX_ERR_ARG;
    if (!path)
        return nas_network_fail(n, EX_ERR_ARG, "onnx: no path");
    ob b = {.net = n, .st = EX_OK};
    onnx__graph_proto__init(&b.graph);
    const ex_network_config *c = nas_network_config(n);
    val logits = body(&b, (val){"input", c->in_channels});
    ex_status st = b.st == EX_OK ? write_model(&b, path, logits.name) : b.st;
    while (b.blocks) {
        arena_block *next = b.blocks->next;
        free(b.blocks);
        b.blocks = next;
    }
    return st == EX_OK ? EX_OK : nas_network_fail(n, st, b.msg);
}
