/**
 * A/B of embedded-runtime options in one process: each variant runs the same query over
 * the same events, interleaved after warm-up passes (`--warmup-runs` rounds at least,
 * and until each variant's took WARMUP_MS of CPU, as the bench's), with a checkpoint
 * every second, and the CPU time of each run is kept. On a shared machine this is the comparison to trust
 * (both sides see the same load); single bench runs swing ±30 %. The order of the variants
 * turns round every round (A, B, B, A, A, B, ...): a run can pay for the garbage and the
 * heap the run before it left, and with a fixed order the variant that always ran second
 * read 5-10 % faster in some sessions whatever it was.
 *
 *   npx tsx bench/ab.ts --query q8 --variants 'lingerRounds=0;lingerRounds=8' [--runs 8] [--events 1000000]
 *
 * A variant is a list of numeric EmbeddedOptions, `name=value` separated by commas;
 * variants are separated by semicolons ('' is the defaults). Prints, per variant, CPU ms
 * per run (min, first quartile, median) and the commits of the last run.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CollectSink } from '../lib/api/sinks.ts';
import { openCheckpointedRuntime } from '../lib/local/checkpointing.ts';
import type { EmbeddedOptions } from '../lib/local/embedded-options.ts';
import { generate, replaySource, WARMUP_MS } from './nexmark/measure.ts';
import { QUERIES } from './nexmark/queries.ts';
import { intOption } from './flags.ts';

const { values } = parseArgs({
  options: {
    query: { type: 'string', default: 'q8' },
    variants: { type: 'string', default: ';lingerRounds=0' },
    runs: { type: 'string', default: '8' },
    events: { type: 'string', default: '1000000' },
    'warmup-runs': { type: 'string', default: '3' },
  },
});


type NumericOptions = Partial<Pick<EmbeddedOptions, (typeof NUMERIC)[number]>>;
const NUMERIC = ['sourceBatchSize', 'sourceChunksPerRound', 'maxEnvelopesPerBatch', 'batchRecords', 'queueCapacity', 'lingerRounds', 'lingerRecords'] as const;

function parseVariant(spec: string): NumericOptions {
  const out: Record<string, number> = {};
  for (const kv of spec.split(',').filter((x) => x.trim())) {
    const [k, v] = kv.split('=').map((x) => x.trim());
    const n = Number(v);
    if (!(NUMERIC as readonly string[]).includes(k) || !Number.isFinite(n)) throw new Error(`--variants: expected name=number with a name among ${NUMERIC.join(', ')}, received "${kv}"`);
    out[k] = n;
  }
  return out;
}

const runs = intOption('runs', values.runs, 1);
const warmups = intOption('warmup-runs', values['warmup-runs'], 0);
const events = generate(intOption('events', values.events, 1), 42);
const variants = values.variants.split(';').map((spec) => ({ spec: spec || '(defaults)', options: parseVariant(spec) }));

for (const name of values.query.split(',')) {
  const q = QUERIES.find((x) => x.name === name);
  if (!q) throw new Error(`--query: one of ${QUERIES.map((x) => x.name).join(', ')}, received "${name}"`);
  const run = async (options: NumericOptions) => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-ab-'));
    try {
      const sources = { events: replaySource(events) };
      const { runtime } = await openCheckpointedRuntime(q.job(undefined), { ...options, sources, sinks: { results: new CollectSink() } }, { dir, intervalMs: 1000, durable: false, start: 'fresh' });
      const c0 = process.cpuUsage();
      const stats = await runtime.run();
      const c = process.cpuUsage(c0);
      return { ms: (c.user + c.system) / 1000, commits: stats.commits };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const times = variants.map(() => [] as number[]);
  const commits = variants.map(() => 0);
  const warmed = variants.map(() => 0);
  for (let w = 0; w < warmups || warmed.some((ms) => ms < WARMUP_MS); w++) for (const [j, v] of variants.entries()) warmed[j] += (await run(v.options)).ms;
  for (let i = 0; i < runs; i++) {
    for (let k = 0; k < variants.length; k++) {
      const j = i % 2 === 0 ? k : variants.length - 1 - k;
      const r = await run(variants[j].options);
      times[j].push(r.ms);
      commits[j] = r.commits;
    }
  }
  variants.forEach((v, j) => {
    const xs = times[j].sort((a, b) => a - b);
    const at = (f: number) => {
      const ms = xs[Math.floor((xs.length - 1) * f)];
      return ms < 100 ? ms.toFixed(1) : ms.toFixed(0);
    };
    console.log(`${name} ${v.spec.padEnd(40)} CPU ms per run: min ${at(0)}  q1 ${at(0.25)}  median ${at(0.5)}   commits ${commits[j]}`);
  });
}
