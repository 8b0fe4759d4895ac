/* Customary loader settings per dataset, as DARTS and common practice use them. */
#include <string.h>

#include "core/abi.h"
#include "data/internal.h"

typedef struct known_stats {
    const char *name;
    int channels;
    float mean[3], std[3];
    int crop_pad;
    bool flip;
} known_stats;

/* Fashion-MNIST's figures are those of its 60000 training images (0.28604, 0.35302);
 * MNIST's the usual ones; CIFAR-10's are DARTS's CIFAR_MEAN and CIFAR_STD. */
static const known_stats known[] = {
    {"fashion-mnist", 1, {0.2860f}, {0.3530f}, 2, false},
    {"mnist", 1, {0.1307f}, {0.3081f}, 2, false},
    {"cifar10",
     3,
     {0.49139968f, 0.48215827f, 0.44653124f},
     {0.24703233f, 0.24348505f, 0.26158768f},
     4,
     true},
};

/* This library's defaults for ds, every field. */
static ex_loader_opts defaults(const ex_dataset *ds, bool train)
{
    ex_loader_opts o = {.size = sizeof o, .batch = 64, .shuffle = train, .prefetch = 2};
    const char *name = ex_dataset_name(ds);
    for (size_t i = 0; name && i < sizeof known / sizeof known[0]; i++) {
        const known_stats *k = &known[i];
        if (strcmp(name, k->name) || ex_dataset_channels(ds) != k->channels)
            continue;
        o.normalize.enabled = true;
        for (int c = 0; c < k->channels; c++) {
            o.normalize.mean[c] = k->mean[c];
            o.normalize.std[c] = k->std[c];
        }
        if (train) {
            o.augment.crop_pad = k->crop_pad;
            o.augment.flip = k->flip;
        }
    }
    return o;
}

void ex_loader_opts_init(ex_loader_opts *o, size_t size, const ex_dataset *ds, bool train)
{
    if (!o)
        return;
    ex_loader_opts d = defaults(ds, train);
    ex__give_config(o, size, &d, sizeof d);
}

ex_status exd_adopt_opts(const ex_dataset *ds, const ex_loader_opts *caller, ex_loader_opts *o,
                         char *msg, size_t len)
{
    *o = defaults(ds, false);
    return ex__adopt_config(o, sizeof *o, caller, "ex_loader_new", msg, len);
}
