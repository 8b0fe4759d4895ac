/* The derived network as an ONNX model (opset 13), written with protobuf-c from the
 * onnx.proto that Debian's libonnx-dev ships. The graph follows nas_derived_forward's
 * structure in evaluation mode (nas_walk: no auxiliary head, no drop path, every batch norm
 * folded into the convolution before it). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/file.h"
#include "nas/export.h"
#include "nas/supernet.h"
#include "nas/walk.h"
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

static ob *ob_of(void *user)
{
    return user;
}

static val val_of(nas_val v)
{
    return (val){v.p, v.c};
}

static nas_val nv(val v)
{
    return (nas_val){(void *)v.name, v.c};
}

static bool failed(void *user)
{
    return ob_of(user)->st != EX_OK;
}

/* A convolution with its batch norm folded in (a bias only when there is one). */
static nas_val conv(void *user, nas_val xv, const nas_conv_desc *s)
{
    ob *b = ob_of(user);
    val x = val_of(xv), y = {"", s->cout};
    int64_t dims[4] = {s->cout, s->cin / s->group, s->kh, s->kw};
    float *w = NULL, *bias = NULL;
    if (b->st != EX_OK)
        return nv(y);
    if (nas_fold(b->net, s, &w, &bias) != EX_OK) {
        b->st = EX_ERR_STATE;
        snprintf(b->msg, sizeof b->msg, "onnx: %s", ex_network_error(b->net));
        return nv(y);
    }
    bool bn = s->bn[0] != '\0';
    const char *in[3] = {x.name, constant(b, 4, dims, w, false),
                         bn ? constant(b, 1, &s->cout, bias, false) : NULL};
    Onnx__NodeProto *nd = node(b, "Conv", bn ? 3 : 2, in, &y);
    int64_t k[2] = {s->kh, s->kw}, st[2] = {s->sh, s->sw}, pad[4] = {s->ph, s->pw, s->ph, s->pw},
            dl[2] = {s->dil, s->dil};
    if (nd) {
        attr_ints(b, nd, "kernel_shape", 2, k);
        attr_ints(b, nd, "strides", 2, st);
        attr_ints(b, nd, "pads", 4, pad);
        attr_ints(b, nd, "dilations", 2, dl);
        attr_int(b, nd, "group", s->group);
    }
    free(w);
    free(bias);
    return nv(y);
}

static nas_val unary(ob *b, const char *op, nas_val x)
{
    val y = {"", x.c};
    const char *in = x.p;
    node(b, op, 1, &in, &y);
    return nv(y);
}

static nas_val relu(void *user, nas_val x)
{
    return unary(ob_of(user), "Relu", x);
}

static nas_val add(void *user, nas_val x, nas_val z)
{
    val y = {"", x.c};
    const char *in[2] = {x.p, z.p};
    node(ob_of(user), "Add", 2, in, &y);
    return nv(y);
}

static nas_val concat(void *user, int count, const nas_val *parts)
{
    ob *b = ob_of(user);
    const char *in[2 + EX_MAX_STEPS];
    val y = {"", 0};
    for (int i = 0; i < count; i++) {
        in[i] = parts[i].p;
        y.c += parts[i].c;
    }
    attr_int(b, node(b, "Concat", count, in, &y), "axis", 1);
    return nv(y);
}

static nas_val shift(void *user, nas_val x)
{
    ob *b = ob_of(user);
    int64_t starts[2] = {1, 1}, ends[2] = {INT64_MAX, INT64_MAX}, axes[2] = {2, 3}, two = 2;
    const char *in[4] = {x.p, constant(b, 1, &two, starts, true), constant(b, 1, &two, ends, true),
                         constant(b, 1, &two, axes, true)};
    val shifted = {"", x.c};
    node(b, "Slice", 4, in, &shifted);
    return nv(shifted);
}

static nas_val pool(void *user, nas_val x, bool max, int stride)
{
    ob *b = ob_of(user);
    val y = {"", x.c};
    const char *in = x.p;
    Onnx__NodeProto *nd = node(b, max ? "MaxPool" : "AveragePool", 1, &in, &y);
    int64_t k[2] = {3, 3}, st[2] = {stride, stride}, pad[4] = {1, 1, 1, 1};
    if (!nd)
        return nv(y);
    attr_ints(b, nd, "kernel_shape", 2, k);
    attr_ints(b, nd, "strides", 2, st);
    attr_ints(b, nd, "pads", 4, pad);
    if (!max)
        attr_int(b, nd, "count_include_pad", 0); /* DARTS's count_include_pad=False */
    return nv(y);
}

/* The classifier: global average pooling, flattening, and a linear layer. */
static nas_val classifier(void *user, nas_val x, int64_t classes)
{
    ob *b = ob_of(user);
    val y = val_of(unary(b, "Flatten", unary(b, "GlobalAveragePool", x)));
    int64_t dims[2] = {classes, x.c};
    float *w = nas_weights(b->net, "classifier.weight", classes * x.c),
          *bias = nas_weights(b->net, "classifier.bias", classes);
    val out = {"", classes};
    if (w && bias) {
        const char *in[3] = {y.name, constant(b, 2, dims, w, false),
                             constant(b, 1, &classes, bias, false)};
        Onnx__NodeProto *nd = node(b, "Gemm", 3, in, &out);
        attr_int(b, nd, "transB", 1);
        if (nd)
            nd->output[0] = (char *)(out.name = "logits");
    } else if (b->st == EX_OK) {
        b->st = EX_ERR_STATE;
        snprintf(b->msg, sizeof b->msg, "onnx: %s", ex_network_error(b->net));
    }
    free(w);
    free(bias);
    return nv(out);
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
    if (nas_network_is_int8(n))
        return nas_network_fail(n, EX_ERR_STATE,
                                "onnx: the network is int8; export the f32 weights it was "
                                "quantized from");
    ob b = {.net = n, .st = EX_OK};
    onnx__graph_proto__init(&b.graph);
    const ex_network_config *c = nas_network_config(n);
    nas_walker w = {&b, conv, relu, add, concat, shift, pool, classifier, failed};
    nas_val logits = nas_walk(&w, nas_network_genotype(n), c, (nas_val){"input", c->in_channels});
    ex_status st = b.st == EX_OK ? write_model(&b, path, logits.p) : b.st;
    while (b.blocks) {
        arena_block *next = b.blocks->next;
        free(b.blocks);
        b.blocks = next;
    }
    return st == EX_OK ? EX_OK : nas_network_fail(n, st, b.msg);
}
