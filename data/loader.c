/* The batch loader. Batches are made by one function of (epoch, position), run either by a
 * prefetch thread filling a ring of slots ahead of the consumer or, with prefetch 0, by
 * ex_loader_next itself; both give the same bytes. A generation counter lets set_state throw
 * away what the thread prepared (or is preparing) for the old position. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

#define MAX_PREFETCH 64
#define MAX_AUGMENT 65536

typedef struct slot {
    float *images;
    int32_t *labels;
    int count;
    ex_loader_state at;
} slot;

struct ex_loader {
    ex_dataset *ds; /* the loader's own view: ds may be freed by the caller */
    ex_loader_opts o;
    int64_t per_epoch;     /* batches per epoch */
    int64_t epoch_samples; /* samples delivered per epoch */
    size_t batch_floats;
    ex_loader_state next; /* the consumer's position */

    /* the permutation of order_epoch; touched only by whoever makes batches */
    int64_t *perm;
    int64_t order_epoch;

    /* prefetch ring, guarded by mu */
    int depth;
    slot *slots;
    bool sync_ready, thread_started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t can_take, can_put;
    int head, filled;
    uint64_t generation;
    ex_loader_state prod; /* the next batch the thread makes */
    bool stop;
};

static ex_loader_state advance(const ex_loader *l, ex_loader_state s)
{
    s.position += l->o.batch;
    if (s.position >= l->epoch_samples) {
        s.epoch++;
        s.position = 0;
    }
    return s;
}

static int batch_count(const ex_loader *l, int64_t position)
{
    int64_t left = l->epoch_samples - position;
    return left < l->o.batch ? (int)left : l->o.batch;
}

/* The whole batch at `at`: a pure function of the dataset, the options and `at`. */
static int make_batch(ex_loader *l, ex_loader_state at, float *images, int32_t *labels)
{
    const ex_loader_opts *o = &l->o;
    const exd_storage *st = l->ds->st;
    if (o->shuffle && l->order_epoch != at.epoch) {
        exd_permutation(o->seed, at.epoch, l->perm, l->ds->count);
        l->order_epoch = at.epoch;
    }
    int count = batch_count(l, at.position);
    for (int j = 0; j < count; j++) {
        int64_t p = at.position + j, i = o->shuffle ? l->perm[p] : p;
        exd_draws d = exd_draw(o->seed, at.epoch, p, &o->augment, st->h, st->w);
        exd_transform(l->ds, i, &o->augment, &o->normalize, &d, images + (size_t)j * st->sample);
        labels[j] = st->labels[l->ds->first + i];
    }
    return count;
}

static void *producer(void *arg)
{
    ex_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->filled == l->depth)
            pthread_cond_wait(&l->can_put, &l->mu);
        if (l->stop)
            break;
        uint64_t gen = l->generation;
        ex_loader_state at = l->prod;
        l->prod = advance(l, at);
        /* the slot after the filled ones: the consumer never reads it until it is counted */
        slot *s = &l->slots[(l->head + l->filled) % l->depth];
        pthread_mutex_unlock(&l->mu);
        s->count = make_batch(l, at, s->images, s->labels);
        s->at = at;
        pthread_mutex_lock(&l->mu);
        if (gen == l->generation) {
            l->filled++;
            pthread_cond_signal(&l->can_take);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static ex_status check_normalize(const ex_dataset *ds, const ex_normalize *nz, char *msg,
                                 size_t len)
{
    if (!nz->enabled)
        return EX_OK;
    int c = ds->st->c;
    if (c > EX_DATA_MAX_CHANNELS)
        return exd_fail(msg, len, EX_ERR_ARG,
                        "ex_loader_new: normalization of %d channels (at most %d)", c,
                        EX_DATA_MAX_CHANNELS);
    for (int k = 0; k < c; k++)
        if (!isfinite(nz->mean[k]) || !isfinite(nz->std[k]) || !(nz->std[k] > 0))
            return exd_fail(msg, len, EX_ERR_ARG,
                            "ex_loader_new: channel %d has mean %g and std %g; std must be "
                            "positive and both finite",
                            k, nz->mean[k], nz->std[k]);
    return EX_OK;
}

static ex_status check_opts(const ex_dataset *ds, const ex_loader_opts *o, char *msg, size_t len)
{
    if (o->batch <= 0)
        return exd_fail(msg, len, EX_ERR_ARG, "ex_loader_new: batch %d must be positive", o->batch);
    if (o->prefetch < 0 || o->prefetch > MAX_PREFETCH)
        return exd_fail(msg, len, EX_ERR_ARG, "ex_loader_new: prefetch %d is not in 0..%d",
                        o->prefetch, MAX_PREFETCH);
    const ex_augment *a = &o->augment;
    if (a->crop_pad < 0 || a->crop_pad > MAX_AUGMENT || a->cutout < 0 || a->cutout > MAX_AUGMENT)
        return exd_fail(msg, len, EX_ERR_ARG,
                        "ex_loader_new: crop_pad %d and cutout %d must lie in 0..%d", a->crop_pad,
                        a->cutout, MAX_AUGMENT);
    if (o->drop_last && ds->count < o->batch)
        return exd_fail(msg, len, EX_ERR_ARG,
                        "ex_loader_new: %lld samples make no full batch of %d with drop_last",
                        (long long)ds->count, o->batch);
    if (ds->st->sample > SIZE_MAX / sizeof(float) / (size_t)o->batch)
        return exd_fail(msg, len, EX_ERR_ARG, "ex_loader_new: a batch of %d is too large",
                        o->batch);
    return check_normalize(ds, &o->normalize, msg, len);
}

static bool alloc_ring(ex_loader *l)
{
    l->slots = calloc((size_t)l->depth, sizeof *l->slots);
    if (!l->slots)
        return false;
    for (int i = 0; i < l->depth; i++) {
        l->slots[i].images = malloc(l->batch_floats * sizeof(float));
        l->slots[i].labels = malloc((size_t)l->o.batch * sizeof(int32_t));
        if (!l->slots[i].images || !l->slots[i].labels)
            return false;
    }
    return true;
}

static ex_status start_thread(ex_loader *l, char *msg, size_t len)
{
    if (!alloc_ring(l))
        return exd_fail(msg, len, EX_ERR_NOMEM, "ex_loader_new: out of memory for %d batches",
                        l->depth);
    if (pthread_mutex_init(&l->mu, NULL))
        return exd_fail(msg, len, EX_ERR_NOMEM, "ex_loader_new: cannot make a mutex");
    if (pthread_cond_init(&l->can_take, NULL)) {
        pthread_mutex_destroy(&l->mu);
        return exd_fail(msg, len, EX_ERR_NOMEM, "ex_loader_new: cannot make a condition");
    }
    if (pthread_cond_init(&l->can_put, NULL)) {
        pthread_cond_destroy(&l->can_take);
        pthread_mutex_destroy(&l->mu);
        return exd_fail(msg, len, EX_ERR_NOMEM, "ex_loader_new: cannot make a condition");
    }
    l->sync_ready = true;
    if (pthread_create(&l->thread, NULL, producer, l))
        return exd_fail(msg, len, EX_ERR_NOMEM, "ex_loader_new: cannot start the prefetch thread");
    l->thread_started = true;
    return EX_OK;
}

void ex_loader_free(ex_loader *l)
{
    if (!l)
        return;
    if (l->thread_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->can_put);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    if (l->sync_ready) {
        pthread_cond_destroy(&l->can_put);
        pthread_cond_destroy(&l->can_take);
        pthread_mutex_destroy(&l->mu);
    }
    for (int i = 0; l->slots && i < l->depth; i++) {
        free(l->slots[i].images);
        free(l->slots[i].labels);
    }
    free(l->slots);
    free(l->perm);
    ex_dataset_free(l->ds);
    free(l);
}

static ex_status init_loader(ex_loader *l, const ex_dataset *ds, char *msg, size_t len)
{
    const ex_loader_opts *o = &l->o;
    l->per_epoch = o->drop_last ? ds->count / o->batch : (ds->count + o->batch - 1) / o->batch;
    l->epoch_samples = o->drop_last ? l->per_epoch * o->batch : ds->count;
    l->batch_floats = (size_t)o->batch * ds->st->sample;
    l->order_epoch = -1;
    l->ds = exd_dataset_view(ds, 0, ds->count);
    if (!l->ds || (o->shuffle && !(l->perm = malloc((size_t)ds->count * sizeof *l->perm))))
        return exd_fail(msg, len, EX_ERR_NOMEM, "ex_loader_new: out of memory");
    l->depth = o->prefetch;
    return l->depth > 0 ? start_thread(l, msg, len) : EX_OK;
}

ex_status ex_loader_new(const ex_dataset *ds, const ex_loader_opts *opts, ex_loader **out,
                        char *msg, size_t msg_len)
{
    if (msg && msg_len)
        msg[0] = '\0';
    if (out)
        *out = NULL;
    if (!ds || !opts || !out)
        return exd_fail(msg, msg_len, EX_ERR_ARG,
                        "ex_loader_new: ds, opts and out must not be NULL");
    ex_loader_opts o;
    ex_status st = exd_adopt_opts(ds, opts, &o, msg, msg_len);
    if (st == EX_OK)
        st = check_opts(ds, &o, msg, msg_len);
    if (st != EX_OK)
        return st;
    ex_loader *l = calloc(1, sizeof *l);
    if (!l)
        return exd_fail(msg, msg_len, EX_ERR_NOMEM, "ex_loader_new: out of memory");
    l->o = o;
    st = init_loader(l, ds, msg, msg_len);
    if (st != EX_OK) {
        ex_loader_free(l);
        return st;
    }
    *out = l;
    return EX_OK;
}

/* Takes the oldest prepared batch from the ring into the caller's buffers. */
static int take_prefetched(ex_loader *l, float *images, int32_t *labels)
{
    pthread_mutex_lock(&l->mu);
    while (l->filled == 0)
        pthread_cond_wait(&l->can_take, &l->mu);
    slot *s = &l->slots[l->head];
    pthread_mutex_unlock(&l->mu);
    /* a filled slot is the consumer's until it is handed back below */
    assert(s->at.epoch == l->next.epoch && s->at.position == l->next.position);
    memcpy(images, s->images, (size_t)s->count * l->ds->st->sample * sizeof *images);
    memcpy(labels, s->labels, (size_t)s->count * sizeof *labels);
    int count = s->count;
    pthread_mutex_lock(&l->mu);
    l->head = (l->head + 1) % l->depth;
    l->filled--;
    pthread_cond_signal(&l->can_put);
    pthread_mutex_unlock(&l->mu);
    return count;
}

ex_status ex_loader_next(ex_loader *l, float *images, int32_t *labels, int *count_out)
{
    if (!l || !images || !labels || !count_out)
        return EX_ERR_ARG;
    if (l->depth > 0)
        *count_out = take_prefetched(l, images, labels);
    else
        *count_out = make_batch(l, l->next, images, labels);
    l->next = advance(l, l->next);
    return EX_OK;
}

int64_t ex_loader_batches_per_epoch(const ex_loader *l)
{
    return l ? l->per_epoch : 0;
}

size_t ex_loader_batch_floats(const ex_loader *l)
{
    return l ? l->batch_floats : 0;
}

ex_loader_state ex_loader_get_state(const ex_loader *l)
{
    return l ? l->next : (ex_loader_state){0, 0};
}

ex_status ex_loader_set_state(ex_loader *l, ex_loader_state state, char *msg, size_t msg_len)
{
    if (msg && msg_len)
        msg[0] = '\0';
    if (!l)
        return exd_fail(msg, msg_len, EX_ERR_ARG, "ex_loader_set_state: loader is NULL");
    if (state.epoch < 0 || state.position < 0 || state.position % l->o.batch ||
        state.position >= l->epoch_samples)
        return exd_fail(msg, msg_len, EX_ERR_ARG,
                        "ex_loader_set_state: epoch %lld position %lld is not a batch start "
                        "(batch %d, %lld samples per epoch)",
                        (long long)state.epoch, (long long)state.position, l->o.batch,
                        (long long)l->epoch_samples);
    l->next = state;
    if (l->depth > 0) {
        pthread_mutex_lock(&l->mu);
        l->generation++;
        l->head = 0;
        l->filled = 0;
        l->prod = state;
        pthread_cond_signal(&l->can_put);
        pthread_mutex_unlock(&l->mu);
    }
    return EX_OK;
}
