/**
 * A checkpointed local-AWS run's dead letters, each once, in its checkpoint directory's
 * dead-letters.jsonl (lib/checkpoint/dead-letter-store.ts, as the embedded runtime keeps
 * them). The operator handler parks letters on the stage DLQs with the epoch that covers
 * them; they are drained into the file (written and fsynced before they are deleted
 * from the DLQ) at the end of a run and when a resume starts. A resume from checkpoint E
 * keeps the letters of epochs up to E, from the file and from the DLQs the killed run
 * left, and drops later ones: the replay parks their records again (under new channel
 * positions, so SQS's deduplication would not catch them). A message SQS moved to a DLQ
 * whole has no epoch and is kept.
 */
import { join } from 'node:path';
import type { SQSClient } from '@aws-sdk/client-sqs';
import { DEAD_LETTERS_FILE, DeadLetterStore } from '../../checkpoint/dead-letter-store.ts';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';
import type { StageQueues } from '../../aws/sqs/sqs-queues.ts';
import { asDeadLetter, type DeadLetterReport, drainDeadLetters } from './dead-letters.ts';

export class LocalAwsDeadLetters {
  private constructor(
    readonly store: DeadLetterStore,
    private readonly job: string,
  ) {}

  /** The file in `dir`: a fresh run empties it, a resume from `restoredEpoch` keeps what it covers. */
  static open(dir: string, job: string, restoredEpoch: number | 'fresh'): LocalAwsDeadLetters {
    return new LocalAwsDeadLetters(DeadLetterStore.open(join(dir, DEAD_LETTERS_FILE), { keepThroughEpoch: restoredEpoch === 'fresh' ? 'none' : restoredEpoch }), job);
  }

  get path(): string {
    return this.store.path!;
  }

  /** Move what the DLQs hold into the file; `through`: only letters of epochs up to it (a resume), the rest are dropped. */
  drain(sqs: SQSClient, queues: readonly StageQueues[], overhead: AwsAccounting, through = Number.POSITIVE_INFINITY): Promise<DeadLetterReport[]> {
    return drainDeadLetters(sqs, queues, overhead, (batch) => {
      for (const d of batch) {
        if (d.kind === 'redriven') this.store.addAt(asDeadLetter(d), d.stage, d.partition ?? -1, 0);
        else if ((d.epoch ?? 0) <= through) this.store.addAt(d, d.stage, d.partition, d.epoch ?? 0);
      }
    });
  }

  /** Every letter of the run, each once, as the runner reports them. */
  reports(): (Extract<DeadLetterReport, { kind: 'deadLetter' }> & { readonly id: string })[] {
    return this.store.list().map((d) => ({ kind: 'deadLetter' as const, job: this.job, ...d }));
  }

  close(): void {
    this.store.close();
  }
}
