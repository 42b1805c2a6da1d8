/**
 * Start-up time of the `sluice` CLI: whole processes, timed from spawn to exit.
 *
 *   npx tsx bench/startup.ts [--bin PATH] [--job PATH] [--runs 10] [--warmup 2]
 *
 * Times three commands, interleaved (one of each per round, so a slow spell of the
 * machine slows all three alike), after `--warmup` unmeasured rounds:
 *
 *   node -e 0                                    the floor: Node itself
 *   node <bin> --help                            the CLI's own start
 *   node <bin> run <job> --input <100 events> --output <tmp>
 *
 * `--bin` defaults to this repository's bin/sluice.js; point it at an installed
 * package's <project>/node_modules/sluice/bin/sluice.js to time what users run. `--job`
 * defaults to examples/first-job.ts (page views per page per minute); for an installed
 * package, to a copy of it in a temporary directory of <project> (removed afterwards), so
 * that its `import 'sluice'` resolves to the installed package, as a user's job would.
 * The 100 page-view events come from a fixed seed. Prints each command's median, min and
 * max, and the medians' ratios to `node -e 0` against the targets (help <= 5x, the
 * 100-event run <= 8x).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { mulberry32 } from '../lib/local/faults.ts';
import { intOption } from './flags.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const EVENTS = 100;
const SEED = 42;

interface Command {
  readonly name: string;
  readonly args: readonly string[];
  /** Most ratio to `node -e 0` allowed for the median; undefined for the floor itself. */
  readonly target?: number;
}


/** `count` page views over about three minutes of event time, a little out of order. */
export function pageViews(count: number, seed: number): { page: string; user: string; time: number }[] {
  const next = mulberry32(seed);
  const start = Date.UTC(2025, 0, 1);
  return Array.from({ length: count }, (_, i) => ({
    page: `/page/${Math.floor(next() * 8)}`,
    user: `user-${Math.floor(next() * 20)}`,
    time: start + i * 1_800 + Math.floor(next() * 3_000),
  }));
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Wall milliseconds of one process, spawn to exit; a failed command stops the bench with its output. */
function time(command: Command): number {
  const t0 = performance.now();
  const child = spawnSync(process.execPath, command.args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  const ms = performance.now() - t0;
  if (child.error) throw child.error;
  if (child.status !== 0) {
    throw new Error(`${command.name} exited ${child.status ?? child.signal}:\n${child.stdout}${child.stderr}`);
  }
  return ms;
}

function main(): void {
  const { values } = parseArgs({
    options: {
      bin: { type: 'string', default: join(ROOT, 'bin', 'sluice.js') },
      job: { type: 'string' },
      runs: { type: 'string', default: '10' },
      warmup: { type: 'string', default: '2' },
    },
  });
  const bin = resolve(values.bin);
  if (!existsSync(bin)) throw new Error(`--bin: expected the path of a sluice launcher (bin/sluice.js), received "${values.bin}"`);
  const runs = intOption('runs', values.runs, 1);
  const warmup = intOption('warmup', values.warmup, 0);
  const example = join(ROOT, 'examples', 'first-job.ts');
  // <project>/node_modules/sluice/bin/sluice.js: the job goes into <project>.
  const installed = /[\\/]node_modules[\\/]sluice[\\/]bin[\\/][^\\/]+$/.test(bin) ? resolve(dirname(bin), '..', '..', '..') : undefined;
  if (values.job !== undefined && !existsSync(values.job)) throw new Error(`--job: expected a job module, received "${values.job}"`);

  const dir = mkdtempSync(join(tmpdir(), 'sluice-startup-'));
  const jobDir = values.job === undefined && installed ? mkdtempSync(join(installed, '.sluice-startup-')) : undefined;
  try {
    // .mts: an ES module whatever the project's package.json says.
    const job = jobDir ? join(jobDir, 'first-job.mts') : resolve(values.job ?? example);
    if (jobDir) writeFileSync(job, readFileSync(example, 'utf8'));
    const input = join(dir, 'views.jsonl');
    const output = join(dir, 'counts.jsonl');
    writeFileSync(input, pageViews(EVENTS, SEED).map((e) => JSON.stringify(e)).join('\n') + '\n');

    const commands: Command[] = [
      { name: 'node -e 0', args: ['-e', '0'] },
      { name: 'sluice --help', args: [bin, '--help'], target: 5 },
      { name: `sluice run (${EVENTS} events)`, args: [bin, 'run', job, '--input', input, '--output', output], target: 8 },
    ];
    const samples = commands.map(() => [] as number[]);
    for (let round = 0; round < warmup + runs; round++) {
      commands.forEach((c, i) => {
        const ms = time(c);
        if (round >= warmup) samples[i]!.push(ms);
      });
    }
    // The run must have done the work, not failed fast.
    const counted = readFileSync(output, 'utf8').split('\n').filter((l) => l !== '').length;
    if (counted === 0) throw new Error(`sluice run wrote no records to ${output}`);

    const label = (p: string) => (p.startsWith(ROOT) ? relative(ROOT, p) : p);
    console.log(`sluice start-up: ${label(bin)}, job ${label(job)}; ${runs} runs after ${warmup} warm-up rounds, node ${process.version}`);
    console.log('');
    const floor = median(samples[0]!);
    const rows = commands.map((c, i) => {
      const s = samples[i]!;
      const ratio = median(s) / floor;
      const verdict = c.target === undefined ? '' : `<= ${c.target}x  ${ratio <= c.target ? 'met' : 'MISSED'}`;
      return [c.name, `${median(s).toFixed(0)} ms`, `${Math.min(...s).toFixed(0)} ms`, `${Math.max(...s).toFixed(0)} ms`, `${ratio.toFixed(1)}x`, verdict];
    });
    const header = ['command', 'median', 'min', 'max', 'x node', 'target'];
    const widths = header.map((h, col) => Math.max(h.length, ...rows.map((r) => r[col]!.length)));
    for (const r of [header, ...rows]) {
      console.log(r.map((cell, col) => (col === 0 || col === 5 ? cell.padEnd(widths[col]!) : cell.padStart(widths[col]!))).join('   ').trimEnd());
    }
    console.log('');
    console.log(`(the run wrote ${counted} window counts)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    if (jobDir) rmSync(jobDir, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    main();
  } catch (err) {
    console.error(`startup: ${(err as Error).message}`);
    process.exit(2);
  }
}
