/**
 * Is the DS2 scaling advice (lib/runtime/scaling-advice.ts) one step? A skew-free keyed job
 * (bench/scaling-job.ts) at parallelism 1 is offered a target rate it cannot take; the
 * advice for that rate is read; the job is run again at the advised parallelism at the same
 * rate, and the bench checks that it then keeps up (processed rate near the target, nothing
 * refused, and what was sent drains within one idle round trip of the load's end, plus a
 * second) and that the advice there asks for no more partitions.
 *
 *   npm run bench:scaling -- [--target local-aws|embedded] [--seconds 20] [--cost-us 5000]
 *     [--shape wait|cpu] [--factor 2.5] [--keys 1024] [--batch 100] [--max-queued 20000] [--max-lag 5000]
 *
 * The target rate is --factor times the nominal capacity of one partition (1e6 / --cost-us):
 * 500/s by default, which one process of local AWS carries with room to spare (near 5,000/s
 * the host, not the partitions, is the limit).
 * --shape wait (default) makes the keyed stage wait --cost-us per record on a timer (a
 * remote call; the thread is free), --shape cpu busy-waits it.
 *
 * Where (bench/scaling-hosts.ts): local-aws (default) runs the Lambda handlers in this
 * process against DynamoDB Local and fauxqs, where a stage's partitions are invoked side
 * by side as on AWS: more partitions add throughput for a waiting cost (one thread: not
 * for a CPU cost). embedded runs `sluice dev`, whose scheduler runs one partition's batch
 * after another, so more partitions add no throughput there and the bench fails: the
 * advice assumes partitions that run side by side. PASS/FAIL per criterion (exit 1 on a FAIL).
 */
import { parseArgs } from 'node:util';
import { type StageAdvice, scalingAdvice } from '../lib/runtime/scaling-advice.ts';
import { int, Verdicts } from './dev-process.ts';
import { embeddedHost, localAwsHost, type ScalingHost } from './scaling-hosts.ts';
import makeJob from './scaling-job.ts';
import { intOption } from './flags.ts';
import { drive, latencyLine, type LoadResult } from './load-driver.ts';
import { publishEvents } from '../lib/index.ts';

const JOB = 'bench/scaling-job.ts';

const { values } = parseArgs({
  options: {
    target: { type: 'string', default: 'local-aws' },
    seconds: { type: 'string', default: '20' },
    'cost-us': { type: 'string', default: '5000' },
    shape: { type: 'string', default: 'wait' },
    factor: { type: 'string', default: '2.5' },
    keys: { type: 'string', default: '1024' },
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
const where = values.target!;
if (where !== 'local-aws' && where !== 'embedded') throw new Error(`--target: expected local-aws or embedded, received "${where}"`);
const factor = Number(values.factor);
if (!(factor > 1)) throw new Error(`--factor: expected a number > 1 (a rate one partition cannot take), received "${values.factor}"`);
const target = Math.round(factor * (1e6 / costUs));

interface Run {
  parallelism: number;
  load: LoadResult;
  processedRate: number;
  maxQueuedSeen: number;
  maxLagSeen: number | null;
  /** Milliseconds from the load's end until everything accepted was processed; null: not within the wait. */
  drainMs: number | null;
  /** Milliseconds one small batch takes through the idle pipeline (what the drain takes without any backlog). */
  tripMs: number;
  /** The advice for the target rate from the run's measurements, per stage. */
  advice: readonly StageAdvice[];
  advised: number;
}

async function host(parallelism: number): Promise<ScalingHost> {
  const params = { costUs, keys, shape };
  if (where === 'local-aws') return localAwsHost(makeJob(params), parallelism, 'work');
  const args = ['--max-queued', String(maxQueued), '--max-lag', String(maxLag), ...Object.entries(params).flatMap(([k, v]) => ['--param', `${k}=${v}`])];
  return embeddedHost(JOB, parallelism, args, 'work');
}

async function run(parallelism: number): Promise<Run> {
  const h = await host(parallelism);
  try {
    let maxQueuedSeen = 0;
    let maxLagSeen: number | null = null;
    let reading = false;
    const sample = () => {
      if (reading) return;
      reading = true;
      void h
        .read()
        .then((m) => {
          maxQueuedSeen = Math.max(maxQueuedSeen, m.queued);
          if (m.lagMs !== null) maxLagSeen = Math.max(maxLagSeen ?? 0, m.lagMs);
        })
        .finally(() => (reading = false));
    };
    const tripMs = await idleTrip(h);
    const before = await h.read();
    const load = await drive({ url: h.url, stream: 'load', rate: target, seconds, batch, retries: 3, event: (n) => ({ id: n, t: Date.now() }), sample });
    const after = await h.read();
    const processedRate = ((after.processed - before.processed) / load.durationMs) * 1000;
    // What `sluice status --target-rate` computes from the same numbers.
    const advice = scalingAdvice(after.loads, target, after.maxParallelism).stages;
    const advised = Math.max(1, ...advice.map((a) => a.advisedPartitions ?? 1));
    // The backlog left: how long what was accepted takes to be processed once the load stops.
    const drainFrom = performance.now();
    let drainMs: number | null = null;
    while (performance.now() - drainFrom < seconds * 3000) {
      if ((await h.read()).processed - before.processed >= load.accepted) {
        drainMs = performance.now() - drainFrom;
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    console.log(`\n[${where}, parallelism ${parallelism}] offered ${int(load.offered)} events at ${int(target)}/s for ${seconds} s`);
    console.log(`  answers: ${Object.entries(load.statuses).map(([s, n]) => `${s}: ${int(n)}`).join(', ')}; response time ${latencyLine(load.latency)}`);
    console.log(`  accepted ${int(load.accepted)}, refused after 3 resends ${int(load.refused)}, abandoned waiting ${int(load.abandoned)}; processed ${int(processedRate)}/s (${((processedRate / target) * 100).toFixed(0)} % of the target)`);
    console.log(`  highest waiting sampled ${int(maxQueuedSeen)} ${h.queuedUnit}${maxLagSeen === null ? '' : `, highest lag ${int(maxLagSeen)} ms`}; the rest processed ${drainMs === null ? `not within ${seconds * 3} s` : `${int(drainMs)} ms`} after the load (idle trip ${int(tripMs)} ms)`);
    for (const a of advice) {
      console.log(`  advice for ${int(target)}/s: stage ${a.name} (${a.partitions} partitions): true rate ${a.truePerPartition === null ? '-' : int(a.truePerPartition)}/s per partition, needs ${int(a.requiredRate)}/s -> ${a.advisedPartitions ?? '-'} partitions`);
    }
    if (load.errors.length) console.log(`  errors: ${load.errors.slice(0, 5).join(' | ')}`);
    return { parallelism, load, processedRate, maxQueuedSeen, maxLagSeen, drainMs, tripMs, advice, advised };
  } finally {
    await h.stop();
  }
}

/** The median of three trips of one small batch through the idle pipeline, from its POST until the slow stage has taken it in. */
async function idleTrip(h: ScalingHost): Promise<number> {
  const trips: number[] = [];
  for (let i = 0; i < 3; i++) {
    const before = (await h.read()).processed;
    const t0 = performance.now();
    await publishEvents(h.url, 'load', Array.from({ length: batch }, (_, k) => ({ id: -1 - k - i * batch, t: Date.now() })));
    while ((await h.read()).processed - before < batch) await new Promise((r) => setTimeout(r, 20));
    trips.push(performance.now() - t0);
  }
  return trips.sort((a, b) => a - b)[1];
}

console.log(`scaling advice on ${where}: keyed job over ${keys} keys, slow step "${shape}" ${costUs} µs per record (one partition's nominal capacity ${int(1e6 / costUs)}/s); target ${int(target)}/s`);
const first = await run(1);
const second = await run(first.advised);

const v = new Verdicts();
console.log('');
v.check('parallelism 1 cannot take the target (back-pressure)', first.processedRate < 0.9 * target, `processed ${int(first.processedRate)}/s of ${int(target)}/s, ${int(first.load.statuses[429] ?? 0)} answers 429`);
v.check('the advice asks for more partitions', first.advised > 1, `advised ${first.advised} partitions`);
// Kept up: nothing refused, and what was left when the load stopped took at most a second
// longer than one batch's trip through the idle pipeline (no backlog grew: at parallelism 1
// it takes tens of seconds). The processed rate over the load's span is shown, not judged:
// the pipeline's fill time (a trip) is in it.
const keptUp = (second.load.statuses[429] ?? 0) === 0 && second.load.refused === 0 && second.drainMs !== null && second.drainMs < second.tripMs + 1000;
v.check(
  `at the advised parallelism ${second.parallelism} it keeps up`,
  keptUp,
  `processed ${int(second.processedRate)}/s of ${int(target)}/s (${((second.processedRate / first.processedRate) * 100 - 100).toFixed(0)} % over parallelism 1), ${int(second.load.statuses[429] ?? 0)} answers 429, highest waiting ${int(second.maxQueuedSeen)}, the rest processed ${second.drainMs === null ? 'not in time' : `${int(second.drainMs)} ms`} after the load against an idle trip of ${int(second.tripMs)} ms`,
);
v.check('no second adjustment (the advice at the new parallelism asks for no more)', second.advised <= second.parallelism, `advised ${second.advised} at parallelism ${second.parallelism}`);
console.log(v.failed === 0 ? 'scaling advice: one step' : `scaling advice: ${v.failed} criteria failed`);
process.exitCode = v.failed === 0 ? 0 : 1;
