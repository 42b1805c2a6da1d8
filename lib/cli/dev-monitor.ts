/**
 * One snapshot of a job running on the embedded runtime (DevStatus): what GET /stats serves,
 * what `sluice status --json` prints, what the dashboard draws and what the live view and the
 * stop summary of `sluice dev` print. Every view reads the same object, so their counters agree.
 */
import { MAX_WATERMARK, MIN_WATERMARK } from '../api/types.ts';
import type { CheckpointDriver } from '../checkpoint/driver.ts';
import type { EmbeddedRuntime } from '../local/embedded.ts';
import type { SinkTap } from '../local/dashboard-sink-tap.ts';
import type { IngestRejections } from '../local/ingest-bounds.ts';
import { InMemoryStateBackend } from '../state/memory.ts';
import { scalingAdvice, stageInputs } from '../runtime/scaling-advice.ts';
import { shedTotal } from './dead-letter-report.ts';
import { rejectedCounts } from './dev-summary.ts';
import { projectCost } from './status-cost.ts';
import type { CheckpointEntry, DevStatus, OperatorStatus, StageStatus } from './status-shape.ts';
import { RateMeter } from './status-rates.ts';

export type { DevStatus } from './status-shape.ts';

/** The checkpointing of a dev run, as the monitor reads it. */
export interface MonitoredCheckpoints {
  readonly driver: CheckpointDriver;
  readonly intervalMs: number | null;
  readonly dir: string;
}

export interface MonitorSource {
  readonly job: string;
  /** The endpoint (or dashboard) URL, once listening. */
  url(): string;
  readonly startedAt: number;
  readonly runtime: EmbeddedRuntime;
  /** The ingestion endpoint's refusals; absent: no endpoint (`sluice run`). */
  readonly rejections?: () => IngestRejections;
  readonly checkpoints?: MonitoredCheckpoints;
  readonly sinks?: SinkTap;
}

const NO_REJECTIONS: IngestRejections = { events: 0, requests: 0, byStatus: {} };
/** Checkpoint entries kept in the timeline (the latest). */
export const TIMELINE_LENGTH = 50;

export class DevMonitor {
  private readonly rates = new RateMeter();

  constructor(private readonly src: MonitorSource) {}

  snapshot(now = Date.now()): DevStatus {
    const { runtime, job } = this.src;
    const plan = runtime.plan;
    const s = runtime.stats();
    const queues = runtime.stageQueues();
    const rates = this.rates.sample(now, s.recordsIn);
    const nodes = plan.job.nodes;

    const watermarks: Record<string, number | null> = {};
    for (const [stage, wm] of Object.entries(s.watermarks)) watermarks[stage] = wm === MIN_WATERMARK || wm === MAX_WATERMARK ? null : wm;
    let lagMs = 0;
    for (const stream of runtime.streams()) lagMs = Math.max(lagMs, runtime.pressure(stream)?.lagMs ?? 0);

    const backend = runtime.backend instanceof InMemoryStateBackend ? runtime.backend : undefined;
    const inputs = stageInputs(plan);
    const stages: StageStatus[] = plan.stages.map((st) => {
      const wm = s.watermarks[st.name];
      const q = queues[st.name] ?? { queuedRecords: 0, capacity: 0, fill: 0 };
      return {
        name: st.name,
        parallelism: st.parallelism,
        operators: st.nodes.map((n) => nodes[n].name),
        queuedRecords: q.queuedRecords,
        queueCapacity: q.capacity,
        queueFill: q.fill,
        watermark: watermarks[st.name] ?? null,
        endOfInput: wm === MAX_WATERMARK,
        watermarkLagMs: wm === undefined || wm === MIN_WATERMARK || wm === MAX_WATERMARK ? null : Math.max(0, now - wm),
        stateKeys: backend ? backend.entityCount(job, st.id) : null,
        recordsIn: s.load[st.name]?.recordsIn ?? 0,
        busyMs: s.load[st.name]?.busyMs ?? 0,
        recordsOut: s.load[st.name]?.recordsOut ?? 0,
      };
    });

    // Records out of an operator: what the operators after it took in, where each of them reads only it.
    const successors = nodes.map(() => [] as number[]);
    for (const n of nodes) for (const i of n.inputs) successors[i.node].push(n.id);
    const combined = new Set(plan.edges.filter((e) => e.combine && e.from.kind === 'stage').map((e) => (e.from as { node: number }).node));
    const outOf = (id: number, count: (name: string) => number): number | null => {
      const next = successors[id];
      if (next.length === 0 || combined.has(id) || next.some((m) => nodes[m].inputs.length !== 1)) return null;
      return next.reduce((sum, m) => sum + count(nodes[m].name), 0);
    };
    const operators: OperatorStatus[] = nodes.map((n) => ({
      name: n.name,
      kind: n.spec.kind,
      stage: plan.stages[plan.stageOfNode[n.id]]?.name ?? null,
      inputs: n.inputs.map((i) => nodes[i.node].name),
      recordsIn: s.recordsIn[n.name] ?? 0,
      recordsOut: outOf(n.id, (name) => s.recordsIn[name] ?? 0),
      inPerSecond: rates[n.name] ?? 0,
      outPerSecond: outOf(n.id, (name) => rates[name] ?? 0),
      lateDropped: s.lateDropped[n.name] ?? 0,
    }));
    const edges = nodes.flatMap((n) => n.inputs.map((i) => ({ from: nodes[i.node].name, to: n.name, shuffle: plan.stageOfNode[i.node] !== plan.stageOfNode[n.id] })));

    const fedByStage = new Set(plan.edges.filter((e) => e.from.kind === 'stage').map((e) => e.toNode));
    let crossings = 0;
    for (const id of fedByStage) crossings += s.recordsIn[nodes[id].name] ?? 0;
    const ck = this.src.checkpoints;
    const timeline = ck ? checkpointTimeline(ck.driver) : [];
    const cost = projectCost({
      events: s.sourceRecords,
      crossings,
      stateKeys: stages.reduce((n, st) => n + (st.stateKeys ?? 0), 0),
      checkpointIntervalMs: ck?.intervalMs ?? null,
      partitions: plan.stages.reduce((n, st) => n + st.parallelism, 0),
    });
    const endpoint = this.src.rejections?.() ?? NO_REJECTIONS;
    return {
      job,
      pid: process.pid,
      url: this.src.url(),
      startedAt: this.src.startedAt,
      uptimeMs: now - this.src.startedAt,
      recordsIngested: s.sourceRecords,
      queuedRecords: s.queuedRecords,
      rejected: rejectedCounts(s, endpoint),
      deadLetters: s.deadLetters,
      deadLetterFile: s.deadLetterFile ?? null,
      lateDropped: { ...s.lateDropped },
      recordsIn: { ...s.recordsIn },
      watermarks,
      lastCheckpoint: ck?.driver.state.lastCompleted?.epoch ?? null,
      at: now,
      lagMs,
      lateDroppedTotal: Object.values(s.lateDropped).reduce((a, b) => a + b, 0),
      shed: Object.fromEntries(Object.entries(s.shed).map(([k, v]) => [k, { ...v }])),
      shedTotal: shedTotal(s.shed),
      stages,
      maxParallelism: plan.job.maxParallelism,
      scaling: scalingAdvice(
        stages.map((st, i) => ({ name: st.name, partitions: st.parallelism, recordsIn: st.recordsIn, busyMs: st.busyMs, recordsOut: st.recordsOut, ...inputs[i] })),
        operators.filter((o) => o.kind === 'source').reduce((n, o) => n + o.inPerSecond, 0),
        plan.job.maxParallelism,
      ),
      operators,
      edges,
      checkpoints: ck ? { dir: ck.dir, intervalMs: ck.intervalMs, timeline } : null,
      sinks: this.src.sinks?.latest() ?? [],
      cost,
    };
  }
}

/** Completed (this process's), aborted and in-flight epochs, oldest first, the latest TIMELINE_LENGTH. */
export function checkpointTimeline(driver: CheckpointDriver): CheckpointEntry[] {
  const entries: CheckpointEntry[] = driver.completed.map((c) => ({
    epoch: c.epoch,
    status: 'completed',
    startedAt: c.openedAt,
    durationMs: c.durationMs,
    bytes: c.bytes,
    savepoint: c.savepoint,
  }));
  for (const epoch of driver.aborted) entries.push({ epoch, status: 'aborted', startedAt: null, durationMs: null, bytes: null, savepoint: null });
  const f = driver.state.inFlight;
  if (f && !entries.some((e) => e.epoch === f.epoch)) entries.push({ epoch: f.epoch, status: 'in progress', startedAt: f.openedAt, durationMs: null, bytes: null, savepoint: f.savepoint?.label ?? null });
  entries.sort((a, b) => a.epoch - b.epoch);
  return entries.slice(-TIMELINE_LENGTH);
}
