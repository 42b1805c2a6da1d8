/**
 * The embedded runtime's state backend: committed state in process memory, with the
 * same commit semantics as the DynamoDB store (version-fenced, all-or-nothing, outbox
 * kept until delivered). A simulated crash drops a partition's uncommitted overlay
 * and runtime caches; what was committed here survives, as DynamoDB items would.
 */
import { CommitConflictError } from '../errors.ts';
import type { OutboxEntry } from '../transport/envelope.ts';
import {
  type CommitBatch,
  emptyProgress,
  type PartitionProgress,
  type PartitionScope,
  type RecoveredPartition,
  type StateBackend,
  scopeId,
  type TimerEntry,
  timerId,
} from './backend.ts';

interface PartitionRecord {
  version: number;
  progress: PartitionProgress;
  timers: Map<string, TimerEntry>;
  outbox: { version: number; entries: readonly OutboxEntry[] }[];
}

export class InMemoryStateBackend implements StateBackend {
  readonly needsPrefetch = false;
  /** key group -> entity -> field -> value. Key groups are shared across stages' scopes by entity prefix. */
  private readonly state = new Map<string, Map<number, Map<string, Map<string, unknown>>>>();
  private readonly partitions = new Map<string, PartitionRecord>();
  /** Commits applied (for tests and metrics). */
  commits = 0;

  private stageState(scope: PartitionScope): Map<number, Map<string, Map<string, unknown>>> {
    // State belongs to the stage, not the partition: a rescale reassigns key groups.
    const id = `${scope.job}/${scope.stage}`;
    let s = this.state.get(id);
    if (!s) this.state.set(id, (s = new Map()));
    return s;
  }

  private record(scope: PartitionScope): PartitionRecord {
    const id = scopeId(scope);
    let r = this.partitions.get(id);
    if (!r) this.partitions.set(id, (r = { version: 0, progress: emptyProgress(), timers: new Map(), outbox: [] }));
    return r;
  }

  async recover(scope: PartitionScope): Promise<RecoveredPartition> {
    const r = this.record(scope);
    return {
      version: r.version,
      progress: structuredClone(r.progress),
      timers: [...r.timers.values()],
      outbox: r.outbox.flatMap((o) => o.entries),
    };
  }

  async prefetch(): Promise<void> {}

  peek(scope: PartitionScope, kg: number, entity: string): ReadonlyMap<string, unknown> | undefined {
    return this.stageState(scope).get(kg)?.get(entity);
  }

  async commit(batch: CommitBatch): Promise<void> {
    this.commitSync(batch);
  }

  /** Synchronous so that the whole batch applies in one step: nothing can interleave. */
  commitSync(batch: CommitBatch): void {
    const r = this.record(batch.scope);
    if (r.version !== batch.expectedVersion) {
      throw new CommitConflictError(scopeId(batch.scope), batch.expectedVersion, `stored version is ${r.version}`);
    }
    const stage = this.stageState(batch.scope);
    for (const w of batch.writes) {
      let groups = stage.get(w.kg);
      if (!groups) stage.set(w.kg, (groups = new Map()));
      let fields = groups.get(w.entity);
      if (w.value === undefined) {
        if (fields) {
          fields.delete(w.field);
          if (fields.size === 0) groups.delete(w.entity);
        }
        continue;
      }
      if (!fields) groups.set(w.entity, (fields = new Map()));
      fields.set(w.field, w.value);
    }
    for (const t of batch.timerDeletes) r.timers.delete(timerId(t));
    for (const t of batch.timerAdds) r.timers.set(timerId(t), t);
    r.version++;
    r.progress = batch.progress;
    if (batch.outbox.length > 0) r.outbox.push({ version: r.version, entries: batch.outbox });
    this.commits++;
  }

  async clearOutbox(scope: PartitionScope, version: number): Promise<void> {
    const r = this.record(scope);
    r.outbox = r.outbox.filter((o) => o.version > version);
  }

  /** Number of live entities of a stage (tests, metrics). */
  entityCount(job: string, stage: number): number {
    let n = 0;
    for (const groups of this.stageState({ job, stage, partition: 0 }).values()) n += groups.size;
    return n;
  }
}
