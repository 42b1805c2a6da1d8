/**
 * The seeded in-process kill harness: a checkpointed embedded run "dies" at a seeded event
 * (a source read or a checkpoint-storage write: blob put or delete, pointer write),
 * leaving its checkpoint directory as a killed process would (every write is synchronous),
 * and a new runtime resumes from the last completed checkpoint, until an attempt finishes.
 * Partition crashes and duplicate deliveries are injected on top. Process kills by real
 * SIGKILL are the crash soak's (bench/soak.ts); this harness runs many more kills per second.
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { POINTER_NAME } from '../../lib/checkpoint/driver.ts';
import { type CheckpointingOptions, type LocalCheckpointing, openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import type { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { FaultInjector, mulberry32 } from '../../lib/local/faults.ts';

export class Killed extends Error {}

export interface KillHarnessOptions {
  readonly seed: number;
  /** Attempts killed before one is left to finish. */
  readonly kills: number;
  readonly logInput?: 'auto' | 'always';
  /** Embedded options of every attempt (batch sizes). */
  readonly embedded?: { readonly sourceBatchSize?: number; readonly maxEnvelopesPerBatch?: number };
  /** The job's transactional sink (default 'out'). */
  readonly sink?: string;
  /** Each kill falls within an attempt's first `window` events (default 80: a resumed attempt may have few more). */
  readonly window?: number;
  /**
   * How the first attempt starts (default fresh); a savepoint (`{ from }`) is started from
   * again, as its user would run the restore again, until a checkpoint of this run completed.
   */
  readonly firstStart?: CheckpointingOptions['start'];
}

export interface KillHarnessRun {
  /** The committed output file's rows. */
  readonly output: unknown[];
  readonly file: string;
  readonly dir: string;
  readonly killed: number;
  /** The epoch each attempt restored (0: none). */
  readonly restoredFrom: number[];
  /** Dead letters each resumed attempt found in the directory's file. */
  readonly reloaded: number[];
  readonly runtime: EmbeddedRuntime;
  readonly checkpoints: LocalCheckpointing;
  readonly stats: Awaited<ReturnType<EmbeddedRuntime['run']>>;
}

/** Runs `make()` until an attempt finishes, killing the first `kills` attempts at seeded events. */
export async function runWithKills(make: () => Job, o: KillHarnessOptions): Promise<KillHarnessRun> {
  const random = mulberry32(o.seed);
  const dir = mkdtempSync(join(tmpdir(), 'sluice-kills-'));
  const file = join(dir, 'out.jsonl');
  const sinkName = o.sink ?? 'out';
  const restoredFrom: number[] = [];
  const reloaded: number[] = [];
  let killed = 0;
  const first = o.firstStart ?? 'fresh';
  const committed = () => existsSync(join(dir, 'pointers', `${POINTER_NAME}.json`));
  const startOf = (attempt: number): CheckpointingOptions['start'] => (attempt === 0 || (typeof first === 'object' && !committed()) ? first : 'resume');
  for (let attempt = 0; ; attempt++) {
    const clock = new ManualClock(1_000_000 + attempt * 10_000_000);
    const sink = new CommittedFileSink(file, join(dir, 'sinks', sinkName), false);
    let events = 0;
    const killAt = attempt < o.kills ? 1 + Math.floor(random() * (o.window ?? 80)) : Number.POSITIVE_INFINITY;
    const tick = (what: string) => {
      if (++events >= killAt) throw new Killed(`killed at ${what}`);
    };
    try {
      const { runtime, checkpoints } = await openCheckpointedRuntime(
        make(),
        {
          clock,
          sinks: { [sinkName]: sink },
          ...o.embedded,
          faults: new FaultInjector({ seed: o.seed * 31 + attempt, crashProbability: 0.03, duplicateProbability: 0.05 }),
          onSourceRecords: () => {
            clock.advance(1);
            tick('source');
          },
        },
        { dir, intervalMs: 3, sinks: [sink], durable: false, ...(o.logInput ? { logInput: o.logInput } : {}), start: startOf(attempt), beforeWrite: (op) => tick(op) },
      );
      restoredFrom.push(checkpoints.restoredEpoch);
      if (attempt > 0) reloaded.push(checkpoints.deadLetters.count);
      const stats = await runtime.run();
      checkpoints.close();
      const text = readFileSync(file, 'utf8');
      const output = (text ? text.trimEnd().split('\n') : []).map((l) => JSON.parse(l) as unknown);
      return { output, file, dir, killed, restoredFrom, reloaded, runtime, checkpoints, stats };
    } catch (e) {
      if (!(e instanceof Killed)) throw e;
      killed++;
    }
  }
}
