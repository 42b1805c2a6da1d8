/**
 * A savepoint's keyed state and timers, moved to the partitions of the plan that
 * restores it (the one that took it, or a changed one whose state fits: savepointFit).
 * State is never tied to a stage or partition: an entity is `${uid}\u0001${key}` in a key
 * group, so it goes to whichever partition of the new plan owns that key group in the
 * stage that runs the operator of that state identity; a timer names its node by id in
 * the saved plan, which the meta's `nodes` turns into a state identity, and the new plan
 * into its node id. Both runtimes install the result: the embedded one in memory
 * (lib/local/restore.ts), AWS as snapshot objects of a manifest of the new plan
 * (lib/aws/restore/savepoint-remap.ts).
 */
import { stateIdOf, type LogicalNode } from '../api/logical.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import { partitionOfKeyGroup } from '../graph/keygroups.ts';
import type { TimerEntry } from '../state/backend.ts';
import { RestoreError } from './driver-errors.ts';
import type { ParticipantKey } from './protocol.ts';
import type { PlanDescription } from './savepoint.ts';
import type { RestoredPartition } from './snapshot.ts';

/** One partition's share of the savepoint, by entity (sorted by the caller when order matters). */
export interface RemappedPartition {
  readonly entities: Map<string, { readonly kg: number; readonly fields: Map<string, unknown> }>;
  /** Timers by entity, their node ids those of the new plan. */
  readonly timers: Map<string, TimerEntry[]>;
}

/** Keyed state and timers of `restored` (the savepoint's partitions) by participant key (`stage/partition`) of `plan`. */
export function remapState(plan: PhysicalPlan, saved: Pick<PlanDescription, 'nodes'>, restored: Iterable<RestoredPartition>, what: string): Map<ParticipantKey, RemappedPartition> {
  const maxP = plan.job.maxParallelism;
  const byStateId = new Map<string, LogicalNode>(plan.job.nodes.map((n) => [stateIdOf(n), n]));
  const out = new Map<ParticipantKey, RemappedPartition>();
  const target = (stateId: string, kg: number) => {
    const node = byStateId.get(stateId);
    if (!node) throw new RestoreError(what, 'state of operators of this job (by uid, or name when unset)', `state of "${stateId}"`);
    const stage = plan.stageOfNode[node.id];
    const key = `${stage}/${partitionOfKeyGroup(kg, plan.stages[stage].parallelism, maxP)}`;
    let p = out.get(key);
    if (!p) out.set(key, (p = { entities: new Map(), timers: new Map() }));
    return { p, node };
  };
  for (const r of restored) {
    for (const [entity, value] of r.entities) target(entity.slice(0, entity.indexOf('\u0001')), value.kg).p.entities.set(entity, value);
    for (const t of r.timers.values()) {
      const stateId = saved.nodes[t.node];
      if (stateId === undefined) throw new RestoreError(what, `timers of the saved plan's nodes (0..${saved.nodes.length - 1})`, `a timer of node ${t.node}`);
      const { p, node } = target(stateId, t.kg);
      const entity = `${stateId}\u0001${t.key}`;
      const list = p.timers.get(entity);
      const moved = { ...t, node: node.id };
      if (list) list.push(moved);
      else p.timers.set(entity, [moved]);
    }
  }
  return out;
}
