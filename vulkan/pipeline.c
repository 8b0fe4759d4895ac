/* Pipelines: one per (shader, writable bindings, variant), made when a recording first
 * needs them and kept until the backend closes.
 *
 * Making a pipeline compiles its shader for the device, which takes tens of milliseconds
 * (lavapipe: 73 pipelines of a DARTS step, 2.9 s of its first recording), and a step needs
 * dozens. So the dry pass before a recording notes the pipelines its dispatches will bind
 * (vkx_pipeline_want), and vkx_pipelines_make compiles the missing ones side by side, one
 * thread per core; vkCreateComputePipelines may be called from several threads at once.
 * Whatever the recording still lacks then (nothing, unless the dry pass missed it) is
 * made on first use. */
#define _POSIX_C_SOURCE 200809L /* sysconf */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vulkan/vk_backend.h"

/* Threads that compile at most; the rest wait for a free one. */
#define VK_COMPILE_THREADS 16

static ex_status module(vk_backend *b, vk_shader_id sh, int writes, VkShaderModule *out)
{
    VkShaderModule *m = &b->modules[sh][writes];
    if (!*m) {
        int f = b->feat.float_controls;
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = vk_shader_table[sh].bytes[writes][f],
                                       .pCode = vk_shader_table[sh].code[writes][f]};
        ex_status st = vk_check(b, vkCreateShaderModule(b->dev, &mi, NULL, m), "shader");
        if (st != EX_OK) {
            *m = VK_NULL_HANDLE;
            return st;
        }
        vk_count_object(b, 1);
    }
    *out = *m;
    return EX_OK;
}

static const vk_pipe *find(const vk_pipe *list, int n, vk_shader_id sh, int writes, int32_t variant)
{
    for (int i = 0; i < n; i++)
        if (list[i].shader == sh && list[i].writes == writes && list[i].variant == variant)
            return &list[i];
    return NULL;
}

/* One pipeline to compile: what vkCreateComputePipelines reads, and what it gave. */
typedef struct vk_job {
    VkDevice dev;
    VkSpecializationMapEntry me;
    VkSpecializationInfo si;
    VkComputePipelineCreateInfo ci;
    int32_t variant;
    VkPipeline pipe;
    VkResult r;
} vk_job;

static ex_status job_init(vk_backend *b, const vk_pipe *want, vk_job *j)
{
    VkShaderModule m;
    ex_status st = module(b, want->shader, want->writes, &m);
    if (st != EX_OK)
        return st;
    *j = (vk_job){.dev = b->dev, .variant = want->variant, .r = VK_NOT_READY};
    j->me = (VkSpecializationMapEntry){0, 0, sizeof(int32_t)};
    j->si = (VkSpecializationInfo){1, &j->me, sizeof j->variant, &j->variant};
    j->ci = (VkComputePipelineCreateInfo){
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = m,
                  .pName = "main",
                  .pSpecializationInfo = &j->si},
        .layout = b->layout};
    return EX_OK;
}

static void job_run(vk_job *j)
{
    j->r = vkCreateComputePipelines(j->dev, VK_NULL_HANDLE, 1, &j->ci, NULL, &j->pipe);
}

/* Keeps a compiled job's pipeline, or reports why it failed. */
static ex_status job_keep(vk_backend *b, const vk_pipe *want, vk_job *j)
{
    ex_status st = vk_check(b, j->r, vk_shader_table[want->shader].name);
    if (st != EX_OK)
        return st;
    vk_count_object(b, 1);
    b->pipes[b->npipes++] = (vk_pipe){want->shader, want->writes, want->variant, j->pipe};
    return EX_OK;
}

ex_status vkx_pipeline(vk_backend *b, vk_shader_id sh, int writes, int32_t variant, VkPipeline *out)
{
    const vk_pipe *have = find(b->pipes, b->npipes, sh, writes, variant);
    if (have) {
        *out = have->pipe;
        return EX_OK;
    }
    if (b->npipes == VK_PIPES) {
        snprintf(b->msg, sizeof b->msg, "vulkan: more than %d pipelines", VK_PIPES);
        return EX_ERR_NOMEM;
    }
    vk_pipe want = {sh, writes, variant, VK_NULL_HANDLE};
    vk_job j;
    ex_status st = job_init(b, &want, &j);
    if (st != EX_OK)
        return st;
    job_run(&j);
    if ((st = job_keep(b, &want, &j)) == EX_OK)
        *out = j.pipe;
    return st;
}

void vkx_pipeline_want(vk_backend *b, vk_shader_id sh, int writes, int32_t variant)
{
    if (b->nwant < VK_PIPES && !find(b->pipes, b->npipes, sh, writes, variant) &&
        !find(b->want, b->nwant, sh, writes, variant))
        b->want[b->nwant++] = (vk_pipe){sh, writes, variant, VK_NULL_HANDLE};
}

/* A thread's share of the jobs: every nth from its first. */
typedef struct vk_share {
    vk_job *jobs;
    int first, n, step;
} vk_share;

static void *compile_share(void *arg)
{
    vk_share *s = arg;
    for (int i = s->first; i < s->n; i += s->step)
        job_run(&s->jobs[i]);
    return NULL;
}

/* Runs n jobs over up to VK_COMPILE_THREADS threads, this one included; a thread that
 * cannot start leaves its share to this one. */
static void compile_all(vk_job *jobs, int n)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = cores < 1 ? 1 : cores > VK_COMPILE_THREADS ? VK_COMPILE_THREADS : (int)cores;
    t = t > n ? n : t;
    pthread_t tid[VK_COMPILE_THREADS];
    vk_share share[VK_COMPILE_THREADS];
    bool started[VK_COMPILE_THREADS] = {false};
    for (int k = 1; k < t; k++) {
        share[k] = (vk_share){jobs, k, n, t};
        started[k] = pthread_create(&tid[k], NULL, compile_share, &share[k]) == 0;
    }
    for (int k = 0; k < t; k++)
        if (k == 0 || !started[k])
            compile_share(&(vk_share){jobs, k, n, t});
    for (int k = 1; k < t; k++)
        if (started[k])
            pthread_join(tid[k], NULL);
}

ex_status vkx_pipelines_make(vk_backend *b)
{
    int n = 0, want = b->nwant;
    b->nwant = 0;
    vk_pipe *todo = b->want;
    vk_job *jobs = want ? malloc((size_t)want * sizeof *jobs) : NULL;
    ex_status st = want && !jobs ? EX_ERR_NOMEM : EX_OK;
    for (int i = 0; i < want && st == EX_OK; i++) {
        if (find(b->pipes, b->npipes, todo[i].shader, todo[i].writes, todo[i].variant))
            continue; /* made on first use since */
        if (b->npipes + n >= VK_PIPES) {
            snprintf(b->msg, sizeof b->msg, "vulkan: more than %d pipelines", VK_PIPES);
            st = EX_ERR_NOMEM;
        } else if ((st = job_init(b, &todo[i], &jobs[n])) == EX_OK) {
            todo[n++] = todo[i];
        }
    }
    if (st == EX_ERR_NOMEM && !jobs)
        snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory");
    if (n > 0)
        compile_all(jobs, n);
    for (int k = 0; k < n; k++) { /* every compiled one kept, whatever failed */
        ex_status kept = job_keep(b, &todo[k], &jobs[k]);
        st = st == EX_OK ? kept : st;
    }
    free(jobs);
    return st;
}

void vkx_pipelines_destroy(vk_backend *b)
{
    for (int i = 0; i < b->npipes; i++)
        vkDestroyPipeline(b->dev, b->pipes[i].pipe, NULL);
    vk_count_object(b, -b->npipes);
    b->npipes = 0;
    for (int i = 0; i < VK_SH_COUNT; i++)
        for (int w = 0; w <= VK_BINDINGS; w++)
            if (b->modules[i][w]) {
                vkDestroyShaderModule(b->dev, b->modules[i][w], NULL);
                vk_count_object(b, -1);
                b->modules[i][w] = VK_NULL_HANDLE;
            }
}
