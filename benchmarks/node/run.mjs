// onnxruntime-web's WASM execution provider under Node (one thread unless --threads): the peer benchmarks/_peers.py
// times next to cuvil-edge. Reads the inputs Python wrote (so every runtime sees the same seeded
// data), runs warm-up then timed calls, optionally writes the outputs back for an accuracy check,
// and prints one JSON line: median/p95 ms, threads, simd, version.
//
//   node run.mjs MODEL.onnx FEEDS.json [--repeat N] [--warmup N] [--threads N] [--out DIR]
//
// FEEDS.json: {"<input name>": {"dtype": "float32" | "int64" | ..., "shape": [...], "file": "<raw .bin>"}}
// with each file the input's little-endian bytes (relative paths are relative to FEEDS.json). With
// --out, output k is written as DIR/<k>.bin plus DIR/outputs.json (name, dtype, shape, file).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as ort from 'onnxruntime-web';

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int32: Int32Array, int64: BigInt64Array,
  int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
};

function parseArgs(argv) {
  const [model, feeds, ...rest] = argv;
  if (!model || !feeds) throw new Error('usage: node run.mjs MODEL.onnx FEEDS.json [--repeat N] [--warmup N] [--threads N] [--out DIR]');
  const opts = { model, feeds, repeat: 20, warmup: 3, threads: 1, out: null };
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '');
    if (!(key in opts)) throw new Error(`unknown option ${rest[i]}`);
    opts[key] = key === 'out' ? rest[i + 1] : Number(rest[i + 1]);
  }
  return opts;
}

function loadFeeds(path) {
  const spec = JSON.parse(readFileSync(path, 'utf8'));
  const feeds = {};
  for (const [name, { dtype, shape, file }] of Object.entries(spec)) {
    const bytes = readFileSync(resolve(dirname(path), file));
    const Arr = ARRAYS[dtype];
    if (!Arr) throw new Error(`input ${name}: dtype ${dtype} is not supported here`);
    const data = new Arr(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    feeds[name] = new ort.Tensor(dtype, dtype === 'bool' ? Uint8Array.from(data) : data, shape);
  }
  return feeds;
}

function percentile(sorted, q) {
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos), hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

function writeOutputs(dir, results) {
  mkdirSync(dir, { recursive: true });
  const manifest = {};
  Object.entries(results).forEach(([name, t], k) => {
    const data = t.data;
    writeFileSync(join(dir, `${k}.bin`), Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    manifest[name] = { dtype: t.type, shape: t.dims, file: `${k}.bin` };
  });
  writeFileSync(join(dir, 'outputs.json'), JSON.stringify(manifest));
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  ort.env.wasm.numThreads = opts.threads;  // > 1: its worker threads over a SharedArrayBuffer
  ort.env.wasm.simd = true;
  const session = await ort.InferenceSession.create(readFileSync(opts.model), {
    executionProviders: ['wasm'], graphOptimizationLevel: 'all',
  });
  const feeds = loadFeeds(opts.feeds);
  let results;
  for (let i = 0; i < opts.warmup; i++) results = await session.run(feeds);
  const times = [];
  for (let i = 0; i < opts.repeat; i++) {
    const t0 = performance.now();
    results = await session.run(feeds);
    times.push(performance.now() - t0);
  }
  if (opts.out) writeOutputs(opts.out, results ?? await session.run(feeds));
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({
    median_ms: percentile(times, 0.5), p95_ms: percentile(times, 0.95), repeat: opts.repeat,
    threads: ort.env.wasm.numThreads, simd: ort.env.wasm.simd, version: ort.env.versions?.web ?? null,
  }));
  await session.release();
}

main().catch((err) => {
  console.error(err?.stack ?? String(err));
  process.exit(1);
});
