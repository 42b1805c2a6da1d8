/**
 * A checkpointed embedded runtime with its loop (and optionally its ingestion endpoint),
 * started on a directory and stopped as a crash would leave it: the tests of accepted
 * input that must survive a restart with `start: 'resume'`.
 */
import { join } from 'node:path';
import type { Sink } from '../../lib/api/sinks.ts';
import type { Job } from '../../lib/api/stream.ts';
import { type CheckpointingOptions, type LocalCheckpointing, openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { CommittedFileSink } from '../../lib/local/committed-sink.ts';
import type { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { type IngestServer, startIngestServer } from '../../lib/local/ingest-server.ts';

export interface Run {
  readonly runtime: EmbeddedRuntime;
  readonly checkpoints: LocalCheckpointing;
  readonly loop: Promise<void>;
  server?: IngestServer;
}

export interface StartOptions {
  readonly checkpointing?: Partial<CheckpointingOptions>;
  /** Called before the runtime starts (to wrap the checkpoint stores). */
  readonly before?: (c: LocalCheckpointing) => void;
  /** Serve the ingestion endpoint on a loopback port. */
  readonly serve?: boolean;
  readonly sourceBatchSize?: number;
}

/** Runs of one test file, all stopped by `stopAll` (its afterEach). The job writes to a committed file `out.jsonl` in the directory. */
export function checkpointedRuns(job: (sink: Sink<unknown>) => Job) {
  const open: Run[] = [];
  const stop = async (r: Run): Promise<void> => {
    const i = open.indexOf(r);
    if (i >= 0) open.splice(i, 1);
    await r.server?.close();
    r.runtime.stop();
    await r.loop;
    r.checkpoints.close();
  };
  const start = async (dir: string, o: StartOptions = {}): Promise<Run> => {
    const sink = new CommittedFileSink(join(dir, 'out.jsonl'), join(dir, 'sinks', 'out'), false);
    const { runtime, checkpoints } = await openCheckpointedRuntime(job(sink), { sinks: { out: sink }, sourceBatchSize: o.sourceBatchSize ?? 50 }, { dir, intervalMs: 0, sinks: [sink], durable: false, ...o.checkpointing });
    o.before?.(checkpoints);
    await runtime.start();
    const run: Run = { runtime, checkpoints, loop: runtime.loop() };
    if (o.serve) run.server = await startIngestServer(runtime, { port: 0 });
    open.push(run);
    return run;
  };
  const stopAll = async () => {
    for (const r of open.splice(0)) await stop(r);
  };
  return { start, stop, stopAll };
}

/** Wait (about 10 s at most) until `f` holds. */
export async function until(f: () => boolean): Promise<void> {
  for (let i = 0; !f(); i++) {
    if (i > 10_000) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** Everything accepted went through and is committed. */
export async function drainAndCheckpoint(r: Run, accepted: number): Promise<void> {
  await until(() => r.runtime.stats().sourceRecords >= accepted && !r.runtime.replaying() && r.runtime.stats().queuedRecords === 0);
  await r.checkpoints.checkpointNow();
}
