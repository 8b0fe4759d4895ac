// The exported ONNX model on onnxruntime (its Node.js binding, CPU provider): its logits
// against exapt's within 1e-4, and the same accuracy on the labels.
// Usage: node onnx_runtime.js ORT_MODULE MODEL INPUTS LOGITS LABELS_IDX_GZ C H W CLASSES
'use strict';
const fs = require('fs');
const zlib = require('zlib');
const [ortPath, model, inputsPath, logitsPath, labelsPath, c, h, w, k] = process.argv.slice(2);
const ort = require(ortPath);

function floats(path) {
    const b = fs.readFileSync(path);
    return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
}

function argmax(v, at, n) {
    let best = 0;
    for (let i = 1; i < n; i++) if (v[at + i] > v[at + best]) best = i;
    return best;
}

(async () => {
    const [C, H, W, K] = [c, h, w, k].map(Number);
    const x = floats(inputsPath), want = floats(logitsPath);
    const n = want.length / K;
    const labels = zlib.gunzipSync(fs.readFileSync(labelsPath)).subarray(8, 8 + n);
    const session = await ort.InferenceSession.create(model, {executionProviders: ['cpu']});
    let worst = 0, rightOrt = 0, rightExapt = 0;
    const batch = 250;
    for (let b = 0; b < n; b += batch) {
        const m = Math.min(batch, n - b);
        const input = new ort.Tensor('float32', x.subarray(b * C * H * W, (b + m) * C * H * W),
                                     [m, C, H, W]);
        const got = (await session.run({input})).logits.data;
        for (let i = 0; i < m * K; i++) {
            const e = want[b * K + i];
            worst = Math.max(worst, Math.abs(got[i] - e) / Math.max(1, Math.abs(e)));
        }
        for (let i = 0; i < m; i++) {
            rightOrt += argmax(got, i * K, K) === labels[b + i];
            rightExapt += argmax(want, (b + i) * K, K) === labels[b + i];
        }
    }
    console.log(`onnxruntime ${ort.env.versions.common}: ${n} images, largest logit difference ` +
                `${worst.toExponential(2)} (relative above 1), accuracy ${rightOrt / n} ` +
                `(exapt ${rightExapt / n})`);
    if (!(worst <= 1e-4) || rightOrt !== rightExapt) process.exit(1);
})().catch((e) => { console.error(e); process.exit(1); });
