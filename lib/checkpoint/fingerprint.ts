/**
 * What a checkpoint must agree on with the job that restores it.
 * - The plan fingerprint (stages, partitions, edges and whether they carry partial
 *   aggregates, operator names and kinds): a chain of checkpoints continues only under
 *   the same plan, with channel positions and what is in flight intact.
 * - The state descriptors (each stateful operator's name, kind and declared states): a
 *   savepoint can start a changed job (new code, new stateless operators, other
 *   parallelism) when these still fit, because keyed state is stored by operator name
 *   and key group, not by stage or partition.
 */
import { createHash } from 'node:crypto';
import { channelsInto, type PhysicalPlan } from '../graph/compile.ts';
import { KEYED_KINDS, type LogicalNode, stateIdOf } from '../api/logical.ts';
import type { Participant } from './protocol.ts';

export interface StateDescriptorInfo {
  /** The operator's state identity: its uid, or its name when it has none (stateIdOf). */
  readonly operator: string;
  /** The operator kind, with what decides its state layout (window assigner and function kind). */
  readonly kind: string;
  /** Declared states [name, kind], sorted by name (keyed process functions). */
  readonly states: readonly (readonly [string, string])[];
}

function hash(v: unknown): string {
  return createHash('sha256').update(JSON.stringify(v)).digest('hex').slice(0, 16);
}

function stateOf(node: LogicalNode): StateDescriptorInfo | null {
  const spec = node.spec;
  if (!KEYED_KINDS.has(spec.kind)) return null;
  let kind: string = spec.kind;
  let states: [string, string][] = [];
  if (spec.kind === 'keyedProcess' || spec.kind === 'coProcess') {
    const declared = (spec.fn as { state?: Record<string, { kind: string }> }).state ?? {};
    states = Object.entries(declared)
      .map(([name, d]): [string, string] => [name, d.kind])
      .sort((a, b) => (a[0] < b[0] ? -1 : 1));
  } else if (spec.kind === 'window') {
    kind = `window(${spec.assigner.kind}, ${spec.fn.kind})`;
  } else if (spec.kind === 'windowJoin') {
    kind = `windowJoin(${spec.assigner.kind}, ${spec.fn.kind})`;
  }
  return { operator: stateIdOf(node), kind, states };
}

export function stateDescriptors(plan: PhysicalPlan): StateDescriptorInfo[] {
  return plan.job.nodes.flatMap((n) => stateOf(n) ?? []).sort((a, b) => (a.operator < b.operator ? -1 : 1));
}

export function planFingerprint(plan: PhysicalPlan): string {
  return hash({
    job: plan.job.name,
    maxParallelism: plan.job.maxParallelism,
    // A uid other than the name is part of the plan; without one, plans hash as they always did.
    nodes: plan.job.nodes.map((n) => (stateIdOf(n) === n.name ? [n.name, n.spec.kind] : [n.name, n.spec.kind, stateIdOf(n)])),
    stages: plan.stages.map((s) => [s.name, s.parallelism, s.nodes]),
    // A combined edge carries partial aggregates, not records: what is in flight (outboxes,
    // held envelopes) differs, so it is another plan. Plans without one hash as before.
    edges: plan.edges.map((e) => [e.from.kind === 'source' ? `source:${e.from.source}` : `${e.from.stage}:${e.from.node}:${e.from.port}`, e.toStage, e.toNode, e.toInput, e.combine ? 'hash+combine' : e.partitioning]),
    state: stateDescriptors(plan),
  });
}

export function stateFingerprint(plan: PhysicalPlan): string {
  return hash({ maxParallelism: plan.job.maxParallelism, state: stateDescriptors(plan) });
}

/** Problems restoring state described by `saved` into `current` (empty: compatible). */
export function stateCompatibility(saved: readonly StateDescriptorInfo[], savedMaxParallelism: number, current: PhysicalPlan): string[] {
  const problems: string[] = [];
  if (savedMaxParallelism !== current.job.maxParallelism) {
    problems.push(`maxParallelism (the number of key groups) was ${savedMaxParallelism}, is now ${current.job.maxParallelism}`);
  }
  const now = new Map(stateDescriptors(current).map((d) => [d.operator, d]));
  for (const s of saved) {
    const c = now.get(s.operator);
    if (!c) {
      const named = current.job.nodes.find((n) => n.name === s.operator);
      // An operator that kept its name but was given another uid: its state is stored under the uid.
      const hint = named ? `; operator "${named.name}" has uid "${stateIdOf(named)}" now (uid("${s.operator}") keeps its state)` : '';
      problems.push(`stateful operator "${s.operator}" (${s.kind}) has no operator of that name in this job${hint}`);
      continue;
    }
    if (c.kind !== s.kind) problems.push(`operator "${s.operator}" was ${s.kind}, is now ${c.kind}`);
    const cs = new Map(c.states);
    for (const [name, kind] of s.states) {
      const k = cs.get(name);
      if (k === undefined) problems.push(`operator "${s.operator}": state "${name}" (${kind}) is no longer declared`);
      else if (k !== kind) problems.push(`operator "${s.operator}": state "${name}" was ${kind} state, is now ${k} state`);
    }
  }
  return problems;
}

/** Every partition that must acknowledge an epoch: source-stage partitions and any partition with an input channel. */
export function participantsOf(plan: PhysicalPlan): Participant[] {
  const out: Participant[] = [];
  for (const stage of plan.stages) {
    const sources = stage.inputs.map((e) => plan.edges[e].from).flatMap((f) => (f.kind === 'source' ? [f.source] : []));
    for (let p = 0; p < stage.parallelism; p++) {
      const fed = stage.inputs.some((e) => channelsInto(plan, plan.edges[e], p).length > 0);
      if (sources.length || fed) out.push({ stage: stage.id, partition: p, sources });
    }
  }
  return out;
}
