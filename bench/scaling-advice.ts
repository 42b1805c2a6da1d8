/**
 * Is the DS2 advice of `sluice dev` (GET /stats `scaling`, lib/runtime/scaling-advice.ts)
 * one step? A skew-free keyed job (bench/scaling-job.ts) at parallelism 1 is offered a
 * target rate it cannot take; the advice for that rate is read; the job is run again at
 * the advised parallelism at the same rate, and the bench checks that the endpoint then
 * keeps up (processed rate near the target, no 429, queued records and lag bounded) and
 * that the advice there asks for no more partitions.
 *
 *   npm run bench:scaling -- [--seconds 20] [--cost-us 500] [--shape wait|cpu] [--factor 2.5]
 *     [--keys 64] [--batch 100] [--max-queued 20000] [--max-lag 5000]
 *
 * The target rate is --factor times the nominal capacity of one partition (1e6 / --cost-us).
 * Which slow step: the embedded runtime runs a job on one thread, so partitions could
 * add throughput only where the cost is waiting, not CPU: --shape wait (default) makes the
 * keyed stage wait --cost-us per record on a timer (a remote call; the thread is free),
 * --shape cpu busy-waits it. The scheduler (lib/local/embedded.ts `step`) awaits each
 * partition's batch before the next partition's, though, so a wait is not overlapped with
 * another partition's either: the bench measures whether the advised partitions add
 * throughput there, and prints PASS/FAIL per criterion (exit 1 on a FAIL).
 */
import { parseArgs } from 'node:util';
import type { DevStatus } from '../lib/cli/status-shape.ts';
import { scalingAdvice } from '../lib/runtime/scaling-advice.ts';
import { int, startDev, Verdicts } from './dev-process.ts';
import { intOption } from './flags.ts';
import { drive, latencyLine, type LoadResult } from './load-driver.ts';

const JOB = 'bench/scaling-job.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '20' },
    'cost-us': { type: 'string', default: '500' },
    shape: { type: 'string', default: 'wait' },
    factor: { type: 'string', default: '2.5' },
    keys: { type: 'string', default: '64' },
    batch: { type: 'string', default: '100' },
    'max-queued': { type: 'string', default: '20000' },
    'max-lag': { type: 'string', default: '5000' },
  },
});
const seconds = intOption('seconds', values.seconds, 1);
const costUs = intOption('cost-us', values['cost-us'], 1);
const keys = intOption('keys', values.keys, 1);
const batch = intOption('batch', values.batch, 1);
const maxQueued = intOption('max-queued', values['max-queued'], 1);
const maxLag = intOption('max-lag', values['max-lag'], 1);
const shape = values.shape!;
if (shape !== 'wait' && shape !== 'cpu') throw new Error(`--shape: expected wait or cpu, received "${shape}"`);
const factor = Number(values.factor);
if (!(factor > 1)) throw new Error(`--factor: expected a number > 1 (a rate one partition cannot take), received "${values.factor}"`);
const target = Math.round(factor * (1e6 / costUs));

interface Run {
  parallelism: number;
  load: LoadResult;
  processedRate: number;
  maxQueuedSeen: number;
  maxLagSeen: number;
  /** The advice for the target rate from the run's last measurements, per stage. */
  advice: { name: string; partitions: number; truePerPartition: number | null; requiredRate: number; advisedPartitions: number | null }[];
  advised: number;
}

const processed = (s: DevStatus) => s.recordsIn.work ?? 0;

async function run(parallelism: number): Promise<Run> {
  const dev = await startDev(JOB, ['--parallelism', String(parallelism), '--max-queued', String(maxQueued), '--max-lag', String(maxLag), '--param', `costUs=${costUs}`, '--param', `keys=${keys}`, '--param', `shape=${shape}`]);
  try {
    let maxQueuedSeen = 0;
    let maxLagSeen = 0;
    let reading = false;
    const sample = () => {
      if (reading) return;
      reading = true;
      void dev
        .stats()
        .then((s) => {
          maxQueuedSeen = Math.max(maxQueuedSeen, s.queuedRecords);
          maxLagSeen = Math.max(maxLagSeen, s.lagMs);
        })
        .finally(() => (reading = false));
    };
    const before = await dev.stats();
    const load = await drive({ url: dev.url, stream: 'load', rate: target, seconds, batch, retries: 3, event: (n) => ({ id: n, t: Date.now() }), sample });
    const after = await dev.stats();
    const processedRate = ((processed(after) - processed(before)) / load.durationMs) * 1000;
    // What `sluice status --target-rate` computes from the same numbers.
    const advice = scalingAdvice(after.scaling.stages, after.scaling.sourceRecords, target, after.maxParallelism).stages.map((s) => ({
      name: s.name,
      partitions: s.partitions,
      truePerPartition: s.truePerPartition,
      requiredRate: s.requiredRate,
      advisedPartitions: s.advisedPartitions,
    }));
    const advised = Math.max(1, ...advice.map((a) => a.advisedPartitions ?? 1));
    console.log(`\n[parallelism ${parallelism}] offered ${int(load.offered)} events at ${int(target)}/s for ${seconds} s`);
    console.log(`  answers: ${Object.entries(load.statuses).map(([s, n]) => `${s}: ${int(n)}`).join(', ')}; response time ${latencyLine(load.latency)}`);
    console.log(`  accepted ${int(load.accepted)}, refused after 3 resends ${int(load.refused)}, abandoned waiting ${int(load.abandoned)}; processed ${int(processedRate)}/s (${((processedRate / target) * 100).toFixed(0)} % of the target)`);
    console.log(`  highest queued records sampled ${int(maxQueuedSeen)} (--max-queued ${int(maxQueued)}), highest lag ${int(maxLagSeen)} ms`);
    for (const a of advice) {
      console.log(`  advice for ${int(target)}/s: stage ${a.name} (${a.partitions} partitions): true rate ${a.truePerPartition === null ? '-' : int(a.truePerPartition)}/s per partition, needs ${int(a.requiredRate)}/s -> ${a.advisedPartitions ?? '-'} partitions`);
    }
    if (load.errors.length) console.log(`  errors: ${load.errors.slice(0, 5).join(' | ')}`);
    return { parallelism, load, processedRate, maxQueuedSeen, maxLagSeen, advice, advised };
  } finally {
    await dev.stop();
  }
}

console.log(`scaling advice: keyed job over ${keys} keys, slow step "${shape}" ${costUs} µs per record (one partition's nominal capacity ${int(1e6 / costUs)}/s); target ${int(target)}/s`);
const first = await run(1);
const second = await run(first.advised);

const v = new Verdicts();
console.log('');
v.check('parallelism 1 cannot take the target (back-pressure)', first.processedRate < 0.9 * target, `processed ${int(first.processedRate)}/s of ${int(target)}/s, ${int(first.load.statuses[429] ?? 0)} answers 429`);
v.check('the advice asks for more partitions', first.advised > 1, `advised ${first.advised} partitions`);
const keptUp = second.processedRate >= 0.9 * target && (second.load.statuses[429] ?? 0) === 0 && second.load.refused === 0;
v.check(
  `at the advised parallelism ${second.parallelism} the endpoint keeps up`,
  keptUp,
  `processed ${int(second.processedRate)}/s of ${int(target)}/s (${((second.processedRate / first.processedRate) * 100 - 100).toFixed(0)} % over parallelism 1), ${int(second.load.statuses[429] ?? 0)} answers 429, highest queued ${int(second.maxQueuedSeen)}, highest lag ${int(second.maxLagSeen)} ms`,
);
v.check('no second adjustment (the advice at the new parallelism asks for no more)', second.advised <= second.parallelism, `advised ${second.advised} at parallelism ${second.parallelism}`);
console.log(v.failed === 0 ? 'scaling advice: one step' : `scaling advice: ${v.failed} criteria failed`);
process.exitCode = v.failed === 0 ? 0 : 1;
