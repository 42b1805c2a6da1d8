/**
 * The crash soak: seeds of `sluice run` child processes SIGKILLed at named fault sites
 * and at random times, resumed until done, each output checked against an uninterrupted
 * run (bench/soak/seed.ts). Every failure prints the command that reproduces it.
 *
 *   npm run soak -- --seeds 1000 [--from 1] [--target embedded|local-aws|dev] [--jobs 2] [--events N] [--keep] [--verbose]
 *
 * dev: `sluice dev` killed while a client publishes, resumed (bench/soak/dev.ts).
 * local-aws starts DynamoDB Local and fauxqs once (servers outlive the killed processes,
 * as AWS does). The last line is `N passed, N failed`; the exit code is 1 on any failure.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { runSoak, scratchRoot, type SoakOptions } from './soak/driver.ts';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '100' },
    from: { type: 'string', default: '1' },
    target: { type: 'string', default: 'embedded' },
    jobs: { type: 'string', default: '2' },
    events: { type: 'string' },
    keep: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
  },
});

function int(flag: string, raw: string, min: number): number {
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < min) {
    console.error(`soak: --${flag}: expected an integer >= ${min}, received ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
}

if (values.target !== 'embedded' && values.target !== 'local-aws' && values.target !== 'dev') {
  console.error(`soak: --target: expected embedded, local-aws or dev (sluice dev killed while a client publishes), received ${JSON.stringify(values.target)}`);
  process.exit(2);
}
const dir = mkdtempSync(join(scratchRoot(), 'sluice-soak-'));
const options: SoakOptions = { from: int('from', values.from!, 0), seeds: int('seeds', values.seeds!, 1), target: values.target, jobs: int('jobs', values.jobs!, 1), events: values.events === undefined ? undefined : int('events', values.events, 1), dir, keep: values.keep, verbose: values.verbose };
const summary = await runSoak(options, (line) => console.log(line));
if (!values.keep) rmSync(dir, { recursive: true, force: true });
else console.log(`kept: ${dir}`);
console.log(`${summary.passed} passed, ${summary.failed} failed`);
// exitCode, not exit(): stdout to a pipe is written asynchronously.
process.exitCode = summary.failed ? 1 : 0;
