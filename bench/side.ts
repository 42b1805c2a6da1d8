/**
 * One side of one query in this process, for comparing two trees (a before and an after):
 *
 *   npx tsx bench/side.ts --query q5 [--side runtime|floor] [--events 1000000] [--runs 5]
 *
 * Warms up as the bench does (five passes, and until they took WARMUP_MS of CPU), then
 * `--runs` measured runs of at least 400 ms of CPU each
 * (several passes, their mean), and prints the best and the median events per CPU-second.
 * Run it from each tree in turn, alternating (before, after, before, after, ...): the
 * machine's speed drifts by tens of percent within minutes, so only alternated runs
 * compare. Within one tree, compare options with bench/ab.ts instead.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CollectSink } from '../lib/api/sinks.ts';
import { openCheckpointedRuntime } from '../lib/local/checkpointing.ts';
import { generate, replaySource, WARMUP_MS } from './nexmark/measure.ts';
import { QUERIES } from './nexmark/queries.ts';
import { intOption } from './flags.ts';

const { values } = parseArgs({
  options: {
    query: { type: 'string', default: 'q5' },
    side: { type: 'string', default: 'runtime' },
    events: { type: 'string', default: '1000000' },
    runs: { type: 'string', default: '5' },
  },
});
const q = QUERIES.find((x) => x.name === values.query);
if (!q) throw new Error(`--query: one of ${QUERIES.map((x) => x.name).join(', ')}, received "${values.query}"`);
if (values.side !== 'runtime' && values.side !== 'floor') throw new Error(`--side: runtime or floor, received "${values.side}"`);
const runs = intOption('runs', values.runs, 1);
const events = generate(intOption('events', values.events, 1), 42);

/** One pass: CPU ms. The runtime's pass checkpoints every second, as the bench's does. */
async function pass(): Promise<number> {
  const c0 = process.cpuUsage();
  if (values.side === 'floor') q!.floor(events, () => {});
  else {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-side-'));
    try {
      const { runtime } = await openCheckpointedRuntime(q!.job(undefined), { sources: { events: replaySource(events) }, sinks: { results: new CollectSink() } }, { dir, intervalMs: 1000, durable: false, start: 'fresh' });
      await runtime.run();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000;
}

for (let i = 0, warmed = 0; i < 5 || warmed < WARMUP_MS; i++) warmed += await pass();
const perRun: number[] = [];
for (let r = 0; r < runs; r++) {
  let ms = 0;
  let passes = 0;
  while (ms < 400) {
    ms += await pass();
    passes++;
  }
  perRun.push(ms / passes);
}
perRun.sort((a, b) => a - b);
const perCore = (ms: number) => `${(events.length / ms / 1000).toFixed(2)} M`;
console.log(`${q.name} ${values.side}: best ${perCore(perRun[0])}, median ${perCore(perRun[Math.floor((perRun.length - 1) / 2)])} events per CPU-second (${runs} runs)`);
