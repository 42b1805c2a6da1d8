/**
 * A watchdog for local-AWS runs (runner.ts, with a log: `SLUICE_DEBUG=1`): when nothing
 * progresses for a while (no message deleted, no record fed, no checkpoint committed or
 * aborted), it prints what the run waits on: the phase, each stage queue's depth (visible,
 * in flight, delayed), each event source's running invocations, pending retries and
 * locked groups with its counters, and the checkpoint loop's step. A stall then names its
 * cause in the output instead of ending in a test's timeout with nothing to go on. It
 * reports again after each further quiet period, and changes nothing.
 */
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';
import type { StageQueues } from '../../aws/sqs/sqs-queues.ts';
import type { LocalCheckpointStateMachine } from './checkpoint-state-machine.ts';
import type { SqsEventSource } from './event-source.ts';
import { type QueueDepth, queueDepth } from './queues.ts';

export interface StallWatchOptions {
  /** Quiet time before a report, and between reports. */
  readonly quietMs: number;
  /** Anything that changes when the run progresses. */
  readonly progress: () => string;
  /** The lines of a report (may ask the servers). */
  readonly report: (quietMs: number) => Promise<string[]>;
  readonly log: (line: string) => void;
}

export class StallWatch {
  private timer?: NodeJS.Timeout;
  private last = '';
  private since = 0;
  private reporting = false;

  constructor(private readonly o: StallWatchOptions) {}

  start(): void {
    if (this.timer) return;
    this.last = this.o.progress();
    this.since = Date.now();
    // Look a few times per quiet period; the timer never keeps the process alive.
    this.timer = setInterval(() => void this.look(), Math.max(10, Math.floor(this.o.quietMs / 4)));
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private async look(): Promise<void> {
    const now = this.o.progress();
    if (now !== this.last) {
      this.last = now;
      this.since = Date.now();
      return;
    }
    const quiet = Date.now() - this.since;
    if (quiet < this.o.quietMs || this.reporting) return;
    this.reporting = true;
    try {
      for (const line of await this.o.report(quiet)) this.o.log(line);
    } catch (e) {
      this.o.log(`no progress for ${Math.round(quiet / 1000)} s; the report failed: ${(e as Error).message}`);
    } finally {
      this.since = Date.now();
      this.reporting = false;
    }
  }
}

/** What a report reads from the runner. */
export interface RunView {
  readonly phase: string;
  readonly fed: number;
  readonly stages: readonly { readonly name: string; readonly source?: SqsEventSource; depth(): Promise<QueueDepth> }[];
  readonly checkpoints?: string;
}

/** The report of a local-AWS run that stopped progressing. */
export async function describeRun(v: RunView, quietMs: number): Promise<string[]> {
  const lines = [`no progress for ${Math.round(quietMs / 1000)} s (phase: ${v.phase}; ${v.fed} records fed):`];
  for (const s of v.stages) {
    const d = await s.depth();
    const m = s.source?.metrics;
    const counters = m ? `; invocations ${m.invocations}, failed ${m.failures}, deleted ${m.deleted}, undeleted ${m.undeleted}, release failures ${m.releaseFailures}, timeouts ${m.timeouts}, group conflicts ${m.groupConflicts}` : '';
    lines.push(`  stage ${s.name}: queue visible ${d.visible}, in flight ${d.inFlight}, delayed ${d.delayed}; ${s.source?.describe() ?? 'no event source'}${counters}`);
  }
  if (v.checkpoints) lines.push(`  ${v.checkpoints}`);
  return lines;
}

/**
 * Watch a runner: progress is records fed, messages deleted per stage, and epochs
 * committed or aborted. Its queue-depth checks go to `overhead` (not a cost per event).
 */
export function watchRun(
  view: () => { phase: string; fed: number; checkpoints?: Pick<LocalCheckpointStateMachine, 'describe' | 'committed' | 'aborted'> },
  stages: readonly { readonly id: number; readonly name: string }[],
  sources: readonly SqsEventSource[],
  queues: readonly StageQueues[],
  sqs: SQSClient,
  overhead: AwsAccounting,
  o: { quietMs: number; log: (line: string) => void },
): StallWatch {
  const progress = () => {
    const v = view();
    return `${v.fed}/${sources.map((s) => s.metrics.deleted).join(',')}/${v.checkpoints?.committed.length ?? 0}/${v.checkpoints?.aborted.length ?? 0}`;
  };
  const watched = stages.map((st) => ({
    name: st.name,
    source: sources[st.id],
    depth: () => {
      overhead.record('sqs', 'GetQueueAttributes', { requests: 1 });
      return queueDepth(sqs, queues[st.id].url);
    },
  }));
  const report = (quietMs: number) => {
    const v = view();
    return describeRun({ phase: v.phase, fed: v.fed, stages: watched, checkpoints: v.checkpoints?.describe() }, quietMs);
  };
  const watch = new StallWatch({ quietMs: o.quietMs, progress, report, log: o.log });
  watch.start();
  return watch;
}
