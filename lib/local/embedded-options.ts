/** Options and plug-in points of the embedded runtime (embedded.ts). */
import type { Sink } from '../api/sinks.ts';
import type { SourceBinding } from '../api/sources.ts';
import type { Clock } from '../api/types.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import type { StateBackend } from '../state/backend.ts';
import type { InstalledPartition } from '../state/memory.ts';
import type { BarrierAck } from '../transport/envelope.ts';
import type { DeadLetterStore } from '../checkpoint/dead-letter-store.ts';
import type { FaultInjector } from './faults.ts';
import type { BarrierEntry, SourceLog } from './input-log.ts';

export interface EmbeddedOptions {
  /** Default: a fresh InMemoryStateBackend. @internal */
  readonly backend?: StateBackend;
  /** Default: the system clock. */
  readonly clock?: Clock;
  /** Replace sinks by name (for example `sluice run --output`). */
  readonly sinks?: Readonly<Record<string, Sink<any>>>;
  /** Rebind sources by name (for example `sluice run --input`). */
  readonly sources?: Readonly<Record<string, SourceBinding<any>>>;
  /** Records per source envelope. Default 4096; 2048 in jobs with chunked rounds (rounds.ts sourceChunking). */
  readonly sourceBatchSize?: number;
  /**
   * Envelopes a source may send per scheduling round, for jobs where that changes nothing
   * but the batching (rounds.ts chunkedRounds: one source, one stage of one partition,
   * no state). Default: as many as make 4096 records (2 chunks of the default 2048); 1:
   * one per round, as for every other job.
   */
  readonly sourceChunksPerRound?: number;
  /**
   * Most envelopes per partition batch (one commit). Default 256; a batch stops earlier
   * once it holds batchRecords records.
   */
  readonly maxEnvelopesPerBatch?: number;
  /**
   * Records after which a batch stops taking envelopes. Default 16384 (4 source
   * envelopes of 4096): downstream envelopes are small (one per watermark step), and a
   * commit per few of them would cost more than their records.
   */
  readonly batchRecords?: number;
  /**
   * Scheduling rounds a partition fed by another stage may wait while its input keeps
   * arriving, so that one batch (one commit) takes several rounds' records (linger.ts).
   * Default 2 (8 until source chunks grew to 4096 records: with chunks that large, 2, 4 and
   * 8 cost the same CPU in Q5, Q7 and Q8, and 8 tripled Q5's latency); 0: take the queue every round.
   */
  readonly lingerRounds?: number;
  /** Queued records at which a lingering partition takes its queue at once. Default 4096. */
  readonly lingerRecords?: number;
  /**
   * Time slicing (time-slice.ts): batches and source chunks sized so that one stretch of
   * user code lasts about this many milliseconds, by the measured cost per record, and the
   * event loop (the HTTP endpoint, timers, signals) runs between batches once a slice is
   * used. Default off: batches by record counts alone, and the schedule a pure function of
   * the job, its input and its configuration. `sluice dev` sets 20.
   */
  readonly sliceMs?: number;
  /** Records a partition's input queue may hold before upstream waits. Default 65536. */
  readonly queueCapacity?: number;
  /** Attempts of a record whose user code throws before it is dead-lettered. Default 3. */
  readonly maxAttempts?: number;
  readonly faults?: FaultInjector;
  /** Where dead letters go (default the checkpoint directory's store, or memory without checkpoints). @internal */
  readonly deadLetters?: DeadLetterStore;
  /** Checkpointed runs (wired by lib/local/checkpointing.ts). @internal */
  readonly checkpoints?: EmbeddedCheckpointHooks;
  /** Start from a checkpoint: installed before any partition opens. @internal */
  readonly restore?: RestorePlan;
  /** Called with the running total of accepted source records (`sluice run --crash-after`). */
  readonly onSourceRecords?: (total: number) => void;
}

/** What a checkpoint driver plugs into the scheduler. */
export interface EmbeddedCheckpointHooks {
  /** Where partitions write snapshot objects. */
  readonly store: BlobStore;
  /** The run's durable dead letters (reloaded at a resume). */
  readonly deadLetters?: DeadLetterStore;
  /** A source's log (barrier entries; records too when `logRecords`). */
  logFor(source: string, replayable: boolean): { log: SourceLog; logRecords: boolean };
  onAck(ack: BarrierAck): void;
  /** Called every scheduling round; `drained`: bounded input exhausted and every queue empty. True when it did something. */
  tick(drained: boolean): boolean | Promise<boolean>;
  /**
   * Optional: no epoch in flight, none asked for, nothing waiting to be injected or
   * recorded. Until a tick says otherwise, the next tick can only open an epoch on time
   * (or the final one): the scheduler may then pull several chunks in one round, ticking
   * between them. Absent: one chunk per round.
   */
  settled?(): boolean;
  /** When the scheduler must wake up even without input. */
  nextWakeAt(): number;
  /** A bounded run may end: the checkpoint after the last input has committed. */
  finished(): boolean;
}

/** A checkpoint to start from, already read and (for a changed plan) remapped to this plan. */
export interface RestorePlan {
  readonly epoch: number;
  /** By participant key `${stage}/${partition}` of this plan; absent partitions start empty. */
  readonly partitions: ReadonlyMap<string, InstalledPartition>;
  /** Per source: its barrier entry at the checkpoint and the positions per source partition. */
  readonly sources: Readonly<Record<string, { readonly entry?: BarrierEntry; readonly positions: readonly number[] }>>;
  /** False for a savepoint of a changed plan: channel positions were not carried over. */
  readonly sameTopology: boolean;
}

export interface RuntimeStats {
  readonly recordsIn: Record<string, number>;
  readonly sourceRecords: number;
  readonly watermarks: Record<string, number>;
  /** Per stage: the records its batches took in, the milliseconds its partitions spent in them (useful time) and the records it sent downstream (scaling-advice.ts). */
  readonly load: Readonly<Record<string, { readonly recordsIn: number; readonly busyMs: number; readonly recordsOut: number }>>;
  /** Events load shedding dropped (SourceOptions.shed), per ingestion stream and reason; absent streams shed none. */
  readonly shed: Readonly<Record<string, Readonly<Record<string, number>>>>;
  readonly queuedRecords: number;
  readonly deadLetters: number;
  /** The file that holds every dead letter (absent: they are in memory only). */
  readonly deadLetterFile?: string;
  readonly rejectedInputs: number;
  readonly duplicatesDropped: number;
  /** Records windows and joins dropped as late (no late-data side output), per operator name; absent: none. */
  readonly lateDropped: Readonly<Record<string, number>>;
  readonly commits: number;
  readonly recoveries: number;
}

