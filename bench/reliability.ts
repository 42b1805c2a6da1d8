/**
 * The reliability report: a fixed, modest set of fault runs, each checked for exactly-once
 * output against an uninterrupted run (lib/testing/checker.ts), in one table.
 *
 *   npm run reliability [-- --embedded-seeds 12 --aws-seeds 2 --dev-seeds 4 --inject-seeds 16]
 *
 * - embedded CLI kills: crash-soak seeds (bench/soak.ts) of `sluice run` SIGKILLed and resumed;
 * - local-AWS kills: the same with `--target local-aws` (DynamoDB Local and fauxqs started here);
 * - sluice dev kills: `sluice dev` killed while a client publishes, resumed (every 202 once);
 * - in-process fault injection: Nexmark jobs on the embedded runtime with partition crashes at
 *   the four batch boundaries and duplicate deliveries (lib/local/faults.ts).
 * Prints runs, faults injected by kind, records checked and the checker's four counts; the
 * last line is `N passed, N failed` (runs), and the exit code is 1 on any failure.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Sinks, type Sink } from '../lib/api/sinks.ts';
import { loadJob } from '../lib/cli/load-job.ts';
import { runJob } from '../lib/local/embedded.ts';
import { FaultInjector } from '../lib/local/faults.ts';
import { generateEvent } from '../lib/nexmark/index.ts';
import { compareOutputs } from '../lib/testing/checker.ts';
import { runSoak, type SoakSummary } from './soak/driver.ts';
import { ROOT } from './soak/seed.ts';

const { values } = parseArgs({
  options: {
    'embedded-seeds': { type: 'string', default: '12' },
    'aws-seeds': { type: 'string', default: '2' },
    'inject-seeds': { type: 'string', default: '16' },
    'dev-seeds': { type: 'string', default: '4' },
  },
});
const count = (flag: string, raw: string | undefined): number => {
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) {
    console.error(`reliability: --${flag}: expected an integer >= 0, received ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
};

interface Row {
  readonly suite: string;
  readonly runs: number;
  readonly passed: number;
  readonly failed: number;
  readonly faults: ReadonlyMap<string, number>;
  readonly records: number;
  readonly lost: number;
  readonly duplicated: number;
  readonly unexpected: number;
  readonly reordered: number;
  readonly seconds: number;
}

const fromSoak = (suite: string, s: SoakSummary): Row => ({ suite, runs: s.runs, passed: s.passed, failed: s.failed, faults: s.kills, records: s.records, lost: s.lost, duplicated: s.duplicated, unexpected: s.unexpected, reordered: s.reordered, seconds: s.durationMs / 1000 });

/** Partition crashes at the batch boundaries and duplicate deliveries, in process, over Nexmark jobs. */
async function injected(seeds: number): Promise<Row> {
  const t0 = performance.now();
  const jobs = ['examples/nexmark/q5.ts', 'examples/nexmark/q8.ts', 'examples/nexmark/q11.ts', 'bench/soak/timers-job.ts'];
  const events = Array.from({ length: 6000 }, (_, n) => generateEvent(n, { seed: 77, ratePerSec: 1000 }));
  const faults = new Map<string, number>();
  const sums = { passed: 0, failed: 0, records: 0, lost: 0, duplicated: 0, unexpected: 0, reordered: 0 };
  const run = async (path: string, injector?: FaultInjector) => {
    const out = Sinks.collect<unknown>();
    await runJob(await loadJob(resolve(ROOT, path), {}), { sources: { events: { kind: 'items', items: events } }, sinks: { results: out as Sink<any> }, faults: injector, sourceBatchSize: 256, maxEnvelopesPerBatch: 4 });
    return out.records;
  };
  for (const path of jobs) {
    const reference = await run(path);
    for (let seed = 1; seed <= Math.ceil(seeds / jobs.length); seed++) {
      const injector = new FaultInjector({ seed, crashProbability: 0.05, duplicateProbability: 0.05 });
      const c = compareOutputs(reference, await run(path, injector), { label: `${path} seed ${seed}` });
      for (const [kind, n] of Object.entries(injector.injected)) {
        const label = kind === 'duplicate' ? 'duplicate delivery' : `partition crash ${kind}`;
        faults.set(label, (faults.get(label) ?? 0) + n);
      }
      if (c.ok && reference.length > 0) sums.passed++;
      else {
        sums.failed++;
        console.log(`FAIL ${c.summary()}`);
      }
      sums.records += c.counts.actual;
      sums.lost += c.counts.lost;
      sums.duplicated += c.counts.extraCopies;
      sums.unexpected += c.counts.unexpected;
      sums.reordered += c.counts.reordered;
    }
  }
  return { suite: 'in-process fault injection', runs: sums.passed + sums.failed, ...sums, faults, seconds: (performance.now() - t0) / 1000 };
}

function table(rows: readonly Row[]): string[] {
  const head = ['suite', 'runs', 'passed', 'failed', 'faults', 'records checked', 'lost', 'duplicated', 'unexpected', 'out of order', 'time'];
  const body = rows.map((r) => [r.suite, r.runs, r.passed, r.failed, [...r.faults.values()].reduce((a, b) => a + b, 0), r.records, r.lost, r.duplicated, r.unexpected, r.reordered, `${r.seconds.toFixed(0)} s`].map(String));
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)];
}

const dir = mkdtempSync(join(tmpdir(), 'sluice-reliability-'));
const rows: Row[] = [];
const log = (l: string) => console.log(l);
try {
  const embedded = count('embedded-seeds', values['embedded-seeds']);
  if (embedded) rows.push(fromSoak('embedded CLI kills (SIGKILL)', await runSoak({ from: 1, seeds: embedded, target: 'embedded', jobs: 2, dir }, log)));
  const aws = count('aws-seeds', values['aws-seeds']);
  if (aws) rows.push(fromSoak('local-AWS kills (SIGKILL)', await runSoak({ from: 1, seeds: aws, target: 'local-aws', jobs: 1, dir }, log)));
  const dev = count('dev-seeds', values['dev-seeds']);
  if (dev) rows.push(fromSoak('sluice dev kills (SIGKILL, SIGINT)', await runSoak({ from: 1, seeds: dev, target: 'dev', jobs: 1, dir }, log)));
  const inject = count('inject-seeds', values['inject-seeds']);
  if (inject) rows.push(await injected(inject));
} finally {
  rmSync(dir, { recursive: true, force: true });
}

console.log('');
for (const l of table(rows)) console.log(l);
console.log('');
console.log('faults injected by kind:');
const kinds = new Map<string, number>();
for (const r of rows) for (const [k, n] of r.faults) kinds.set(`${r.suite}: ${k}`, n);
const kw = Math.max(...[...kinds.keys()].map((k) => k.length));
for (const [k, n] of [...kinds].sort((a, b) => b[1] - a[1])) console.log(`  ${k.padEnd(kw)}  ${n}`);
const passed = rows.reduce((n, r) => n + r.passed, 0);
const failed = rows.reduce((n, r) => n + r.failed, 0);
console.log(`${passed} passed, ${failed} failed`);
// exitCode, not exit(): stdout to a pipe is written asynchronously.
process.exitCode = failed ? 1 : 0;
