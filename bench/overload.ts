/**
 * `sluice dev` overloaded: twice its capacity offered for a while, with the 429 bounds set.
 *
 *   npm run bench:overload -- [--seconds 30] [--cost-us 1000] [--factor 2] [--max-queued 4000]
 *     [--max-lag 5000] [--batch 100] [--retries 3] [--keep 0.25]
 *
 * The job (bench/overload-job.ts) busy-waits --cost-us per record in a map. A short
 * calibration measures its capacity (records processed per second with the endpoint
 * idle but for the calibration's own requests); then bench/load-driver.ts offers --factor
 * times that, open loop, in batches through the ingest client (Retry-After honoured, at most
 * --retries resends, abandoned when the time is up). Two phases, each its own process:
 *
 *   bounded  --max-queued and --max-lag only: the excess is answered 429;
 *   shedding the same, and the stream sheds past --max-queued / 2 queued records, keeping
 *            --keep of the events (a 202's `accepted` counts what is enqueued; its `shed`
 *            lists what was dropped; accepted + shed + rejected = the request's events).
 *
 * Prints per phase the answers by status, response times (hdr-histogram), the dev
 * process's peak memory (/proc VmHWM, and VmRSS sampled every 200 ms) against the bound
 * declared below, and the counts once drained; then a PASS/FAIL line per criterion, and
 * exits 1 on any FAIL. The memory bound: the process's memory once calibrated and idle,
 * plus --max-queued records at 4 KiB each (the request body, the parsed event, its
 * input-log line and envelope, all held while queued), plus 64 MiB for what the heap may
 * grow by before a collection and for the connections of the requests in flight.
 */
import { parseArgs } from 'node:util';
import { IngestClient } from '../lib/index.ts';
import { type DevProcess, int, memoryOf, mib, pollUntil, startDev, Verdicts } from './dev-process.ts';
import { intOption } from './flags.ts';
import { drive, latencyLine, type LoadResult } from './load-driver.ts';

const JOB = 'bench/overload-job.ts';
const PER_QUEUED_RECORD = 4096;
const SLACK = 64 * 1024 * 1024;
const ANSWER_WITHIN_MS = 1000;

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '30' },
    'cost-us': { type: 'string', default: '1000' },
    factor: { type: 'string', default: '2' },
    'max-queued': { type: 'string', default: '4000' },
    'max-lag': { type: 'string', default: '5000' },
    batch: { type: 'string', default: '100' },
    retries: { type: 'string', default: '3' },
    keep: { type: 'string', default: '0.25' },
  },
});
const seconds = intOption('seconds', values.seconds, 1);
const costUs = intOption('cost-us', values['cost-us'], 1);
const maxQueued = intOption('max-queued', values['max-queued'], 2);
const maxLag = intOption('max-lag', values['max-lag'], 1);
const batch = intOption('batch', values.batch, 1);
const retries = intOption('retries', values.retries, 0);
const factor = Number(values.factor);
if (!(factor > 0)) throw new Error(`--factor: expected a number > 0, received "${values.factor}"`);
const keep = Number(values.keep);
if (!(keep > 0 && keep < 1)) throw new Error(`--keep: expected a number between 0 and 1 (exclusive), received "${values.keep}"`);

const payload = 'x'.repeat(160);
const event = (n: number) => ({ id: n, t: Date.now(), payload });
const processed = (s: { recordsIn: Record<string, number> }) => s.recordsIn.slow ?? 0;
const verdicts = new Verdicts();

/** Records per second the job processes: a burst queued at once, timed from 10 % to 90 % of it processed. */
async function calibrate(dev: DevProcess): Promise<{ capacity: number; accepted: number }> {
  const count = Math.min(maxQueued, Math.max(500, Math.round((3 * 1e6) / costUs)));
  const sent = await new IngestClient({ url: dev.url, maxEventsPerRequest: batch }).send('load', Array.from({ length: count }, (_, i) => event(-1 - i)));
  const marks: number[] = [];
  await pollUntil(
    dev.stats,
    (s) => {
      const done = processed(s);
      if (marks.length === 0 && done >= count * 0.1) marks.push(performance.now(), done);
      if (marks.length === 2 && done >= count * 0.9) marks.push(performance.now(), done);
      return done >= sent.accepted;
    },
    120_000,
    20,
  );
  const [t1, n1, t2, n2] = marks;
  return { capacity: ((n2 - n1) / (t2 - t1)) * 1000, accepted: sent.accepted };
}

interface Phase {
  load: LoadResult;
  before: number;
  peak: number;
  sampledMax: number;
  bound: number;
  drained: { processed: number; ingested: number; shed: number };
  processedRate: number;
  exit: number | null;
  calibrated: number;
}

async function phase(name: string, rateOf: () => number, extra: readonly string[], calibration?: (dev: DevProcess) => Promise<number>): Promise<Phase> {
  const dev = await startDev(JOB, ['--max-queued', String(maxQueued), '--max-lag', String(maxLag), '--param', `costUs=${costUs}`, ...extra]);
  try {
    const calibrated = calibration ? await calibration(dev) : 0;
    const rate = rateOf();
    const before = memoryOf(dev.pid).rss;
    let sampledMax = before;
    const startStats = await dev.stats();
    const load = await drive({ url: dev.url, stream: 'load', rate, seconds, batch, retries, event, sample: () => (sampledMax = Math.max(sampledMax, memoryOf(dev.pid).rss)) });
    const endStats = await dev.stats();
    const processedRate = ((processed(endStats) - processed(startStats)) / load.durationMs) * 1000;
    const last = await pollUntil(dev.stats, (s) => s.queuedRecords === 0 && processed(s) === s.recordsIngested, 300_000, 100);
    const peak = memoryOf(dev.pid).peak;
    const exit = await dev.stop();
    console.log(`\n[${name}] offered ${int(load.offered)} events at ${int(rate)}/s for ${seconds} s in batches of ${batch} (${int(load.offered / batch)} batches)`);
    console.log(`  answers: ${Object.entries(load.statuses).map(([s, n]) => `${s}: ${int(n)}`).join(', ')}; response time ${latencyLine(load.latency)}`);
    console.log(`  events: answered 202 ${int(load.answered)} (accepted ${int(load.accepted)}, shed ${int(load.shed)}, rejected ${int(load.rejected)}), refused after ${retries} resends ${int(load.refused)}, abandoned waiting ${int(load.abandoned)}`);
    console.log(`  processed during the load ${int(processedRate)}/s; once drained: processed ${int(processed(last))}, ingested ${int(last.recordsIngested)}, shed (GET /stats) ${int(last.shedTotal)}`);
    const bound = before + maxQueued * PER_QUEUED_RECORD + SLACK;
    console.log(`  memory of the dev process: ${mib(before)} calibrated and idle, ${mib(sampledMax)} highest VmRSS sampled, ${mib(peak)} VmHWM; bound ${mib(bound)}`);
    if (load.errors.length) console.log(`  errors: ${load.errors.slice(0, 5).join(' | ')}`);
    return { load, before, peak, sampledMax, bound, drained: { processed: processed(last), ingested: last.recordsIngested, shed: last.shedTotal }, processedRate, exit, calibrated };
  } catch (err) {
    await dev.stop();
    throw err;
  }
}

function answerChecks(name: string, p: Phase): void {
  const others = Object.keys(p.load.statuses).filter((s) => s !== '202' && s !== '429');
  verdicts.check(`${name}: every answer 202 or 429`, others.length === 0 && p.load.errors.length === 0, `statuses ${JSON.stringify(p.load.statuses)}${p.load.errors.length ? `, ${p.load.errors.length} errors` : ''}`);
  const max = p.load.latency.maxValue / 1000;
  verdicts.check(`${name}: every answer within ${ANSWER_WITHIN_MS} ms`, max <= ANSWER_WITHIN_MS, `max ${max.toFixed(1)} ms, p99 ${(p.load.latency.getValueAtPercentile(99) / 1000).toFixed(1)} ms`);
  verdicts.check(`${name}: peak memory within the bound`, p.peak <= p.bound, `VmHWM ${mib(p.peak)} <= ${mib(p.bound)} (idle ${mib(p.before)} + ${int(maxQueued)} x 4 KiB + 64 MiB)`);
  verdicts.check(`${name}: sluice dev stopped cleanly`, p.exit === 0, `exit code ${p.exit}`);
}

console.log(`overload: map busy ${costUs} µs per record; --max-queued ${int(maxQueued)}, --max-lag ${maxLag} ms; load ${factor}x capacity for ${seconds} s`);
let calibration = { capacity: 0, accepted: 0 };
const rate = () => factor * calibration.capacity;
const bounded = await phase('bounded', rate, [], async (dev) => {
  calibration = await calibrate(dev);
  console.log(`calibration: ${int(calibration.accepted)} events, ${int(calibration.capacity)} records/s processed (the busy-wait alone: ${int(1e6 / costUs)}/s)`);
  return calibration.accepted;
});
const whenQueued = Math.floor(maxQueued / 2);
const shedding = await phase('shedding', rate, ['--param', `keep=${keep}`, '--param', `whenQueued=${whenQueued}`]);

console.log('');
answerChecks('bounded', bounded);
const b = bounded.load;
verdicts.check('bounded: overloaded (some requests answered 429)', (b.statuses[429] ?? 0) > 0, `${int(b.statuses[429] ?? 0)} answers 429`);
verdicts.check(
  'bounded: nothing accepted is lost (processed = accepted)',
  bounded.drained.processed === bounded.calibrated + b.accepted && bounded.drained.ingested === bounded.drained.processed,
  `processed ${int(bounded.drained.processed)} = accepted ${int(bounded.calibrated + b.accepted)} (calibration ${int(bounded.calibrated)} + load ${int(b.accepted)}) = ingested ${int(bounded.drained.ingested)}`,
);
answerChecks('shedding', shedding);
const sh = shedding.load;
verdicts.check('shedding: the stream shed', sh.shed > 0, `${int(sh.shed)} events shed past ${int(whenQueued)} queued records`);
verdicts.check(
  'shedding: shed + processed = events answered 202',
  sh.shed + shedding.drained.processed === sh.answered - sh.rejected && shedding.drained.processed === sh.accepted,
  `shed ${int(sh.shed)} + processed ${int(shedding.drained.processed)} = ${int(sh.shed + shedding.drained.processed)}, answered 202 ${int(sh.answered)} (rejected ${sh.rejected}); processed = accepted ${int(sh.accepted)}`,
);
verdicts.check('shedding: the client and GET /stats count the same shed events', sh.shed === shedding.drained.shed, `client ${int(sh.shed)}, /stats shedTotal ${int(shedding.drained.shed)}`);
console.log(verdicts.failed === 0 ? 'overload: all criteria passed' : `overload: ${verdicts.failed} criteria failed`);
process.exitCode = verdicts.failed === 0 ? 0 : 1;
