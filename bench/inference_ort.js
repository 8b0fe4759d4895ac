// onnxruntime (Node.js binding, CPU provider) on a model bench_inference exported: batch-1
// latency and batch-256 throughput over the same inputs (host tensors in and out), and its
// batch-256 logits against the ones bench_inference dumped. Prints one JSON object.
// Usage: node inference_ort.js ORT_MODULE MODEL DUMP_DIR BACKEND [SECONDS] [THREADS]
'use strict';
const fs = require('fs');
const os = require('os');
const [ortPath, model, dump, backend, seconds = '3', threads = String(os.cpus().length)] =
    process.argv.slice(2);
const ort = require(ortPath);

function floats(path) {
    const b = fs.readFileSync(path);
    return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

async function median(session, x, n) {
    const input = new ort.Tensor('float32', x.subarray(0, n * 784), [n, 1, 28, 28]);
    const times = [];
    let out;
    for (let i = 0; i < 3; i++) out = await session.run({input});
    const start = process.hrtime.bigint();
    while (times.length < 5 || Number(process.hrtime.bigint() - start) / 1e9 < Number(seconds)) {
        const t0 = process.hrtime.bigint();
        out = await session.run({input});
        times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    times.sort((a, b) => a - b);
    return [times[times.length >> 1], out.logits.data];
}

(async () => {
    const session = await ort.InferenceSession.create(model, {
        executionProviders: ['cpu'], intraOpNumThreads: Number(threads),
        graphOptimizationLevel: 'all'});
    const x = floats(`${dump}/input-256.f32`), want = floats(`${dump}/logits-${backend}-256.f32`);
    const [ms1] = await median(session, x, 1);
    const [ms256, got] = await median(session, x, 256);
    let worst = 0;
    for (let i = 0; i < want.length; i++)
        worst = Math.max(worst, Math.abs(got[i] - want[i]) / Math.max(1, Math.abs(want[i])));
    console.log(JSON.stringify({bench: 'inference', runtime: `onnxruntime ${ort.env.versions.common}`,
        provider: 'cpu', threads: Number(threads), batch1_ms: ms1, batch256_ms: ms256,
        batch256_images_per_s: 256 / (ms256 / 1e3), logits_vs_exapt: worst}));
})().catch((e) => { console.error(e); process.exit(1); });
