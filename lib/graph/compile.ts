/**
 * The job compiler: a logical graph becomes stages (operator chains between
 * shuffles). A stage is what runs as one Lambda function on AWS and as one set of
 * in-process partitions locally. Misconfigurations fail here, naming the operator.
 */
import { JobDefinitionError } from '../errors.ts';
import type { KeySelector } from '../api/types.ts';
import { combinesInput } from './window-plan.ts';
import { KEYED_KINDS, MAIN_PORT, stateIdOf, type JobGraph, type LogicalNode } from '../api/logical.ts';

export type EdgeSource = { readonly kind: 'source'; readonly source: string } | { readonly kind: 'stage'; readonly stage: number; readonly node: number; readonly port: string };

/** An edge into a stage: records cross it through channels (one per upstream partition). */
export interface StageEdge {
  readonly id: number;
  readonly from: EdgeSource;
  readonly toStage: number;
  readonly toNode: number;
  /** Input index of the target operator (0, or 1 for the right side of two-input operators). */
  readonly toInput: number;
  /** source: partition p feeds partition p; hash: by key group; rebalance: upstream i feeds i mod P. */
  readonly partitioning: 'source' | 'hash' | 'rebalance';
  readonly key?: KeySelector<any>;
  /**
   * Hash edges into a window that pre-aggregates (lib/operators/window-combiner.ts): the
   * sender sends one partial aggregate per (key, pane) of each channel buffer, not records.
   * Part of the plan fingerprint: a checkpoint with records in flight cannot continue a
   * plan that expects partials, nor the reverse.
   */
  readonly combine?: true;
}

/** Where a node's output goes: an operator in the same stage, or an edge to another stage. */
export type Successor =
  | { readonly kind: 'local'; readonly port: string; readonly node: number; readonly input: number }
  | { readonly kind: 'edge'; readonly port: string; readonly edge: number };

export interface StagePlan {
  readonly id: number;
  readonly name: string;
  readonly parallelism: number;
  /** Logical node ids in topological order. */
  readonly nodes: number[];
  /** Edges entering this stage. */
  readonly inputs: number[];
  /** Edges leaving this stage. */
  readonly outputs: number[];
}

export interface PhysicalPlan {
  /** The logical graph it was compiled from. @internal */
  readonly job: JobGraph;
  readonly stages: readonly StagePlan[];
  readonly edges: readonly StageEdge[];
  readonly stageOfNode: readonly number[];
  /** Per logical node: where its output goes. @internal */
  readonly successors: readonly Successor[][];
}

function checkParallelism(node: string, value: number, maxParallelism: number): void {
  if (!Number.isSafeInteger(value) || value < 1 || value > maxParallelism) {
    throw new JobDefinitionError(node, `parallelism an integer from 1 to maxParallelism (${maxParallelism})`, String(value));
  }
}

function checkNames(graph: JobGraph): void {
  const seen = new Map<string, LogicalNode>();
  for (const n of graph.nodes) {
    const prior = seen.get(n.name);
    if (prior) {
      throw new JobDefinitionError(n.name, 'a name no other operator or source of the job uses', `a duplicate of ${prior.spec.kind} #${prior.id}`);
    }
    seen.set(n.name, n);
  }
  // State is stored under the uid (the name when unset): two operators with one identity would share it.
  const ids = new Map<string, LogicalNode>();
  for (const n of graph.nodes) {
    const id = stateIdOf(n);
    const prior = ids.get(id);
    if (prior) {
      const how = (x: LogicalNode) => `${x.spec.kind} "${x.name}"${x.uid !== undefined ? ` (uid "${x.uid}")` : ' (its name)'}`;
      throw new JobDefinitionError(n.name, `a uid no other operator of the job has (state is stored under it)`, `uid "${id}" of both ${how(prior)} and ${how(n)}`);
    }
    ids.set(id, n);
  }
}

export function compile(graph: JobGraph): PhysicalPlan {
  const maxP = graph.maxParallelism;
  if (!Number.isSafeInteger(maxP) || maxP < 1 || maxP > 32768) {
    throw new JobDefinitionError(graph.name, 'maxParallelism an integer from 1 to 32768', String(maxP));
  }
  checkParallelism(graph.name, graph.parallelism, maxP);
  checkNames(graph);
  if (graph.sources().length === 0) throw new JobDefinitionError(graph.name, 'at least one source', 'none');
  if (graph.sinks().length === 0) throw new JobDefinitionError(graph.name, 'at least one sink (sinkTo, print)', 'none');

  const stages: { id: number; parallelism: number; nodes: number[]; inputs: number[]; outputs: number[] }[] = [];
  const edges: StageEdge[] = [];
  const stageOfNode: number[] = [];
  const successors: Successor[][] = graph.nodes.map(() => []);

  const newStage = (parallelism: number) => {
    const s = { id: stages.length, parallelism, nodes: [] as number[], inputs: [] as number[], outputs: [] as number[] };
    stages.push(s);
    return s;
  };
  const addEdge = (e: Omit<StageEdge, 'id'>) => {
    const edge: StageEdge = { ...e, id: edges.length };
    edges.push(edge);
    stages[edge.toStage].inputs.push(edge.id);
    if (edge.from.kind === 'stage') {
      stages[edge.from.stage].outputs.push(edge.id);
      successors[edge.from.node].push({ kind: 'edge', port: edge.from.port, edge: edge.id });
    }
    return edge;
  };

  for (const node of graph.nodes) {
    if (node.parallelism !== undefined) checkParallelism(node.name, node.parallelism, maxP);
    const kind = node.spec.kind;
    for (const input of node.inputs) {
      if (input.node >= node.id) throw new JobDefinitionError(node.name, 'inputs defined before the operator', `input #${input.node}`);
    }
    const hashInputs = node.inputs.filter((i) => i.partitioning.kind === 'hash');
    if (KEYED_KINDS.has(kind) && hashInputs.length !== node.inputs.length) {
      throw new JobDefinitionError(node.name, `a keyed input for ${kind} (call keyBy(...) first)`, 'an unkeyed stream');
    }
    if (hashInputs.length > 0 && !KEYED_KINDS.has(kind)) {
      throw new JobDefinitionError(node.name, 'a keyed operator (process, window, join, connect) after keyBy', kind);
    }

    if (node.spec.kind === 'source') {
      const stage = newStage(node.parallelism ?? graph.parallelism);
      stage.nodes.push(node.id);
      stageOfNode[node.id] = stage.id;
      addEdge({ from: { kind: 'source', source: node.spec.source.name }, toStage: stage.id, toNode: node.id, toInput: 0, partitioning: 'source' });
      continue;
    }

    const upstreamStages = new Set(node.inputs.map((i) => stageOfNode[i.node]));
    const [only] = upstreamStages;
    const chainable =
      hashInputs.length === 0 &&
      upstreamStages.size === 1 &&
      (node.parallelism === undefined || node.parallelism === stages[only].parallelism);
    if (chainable) {
      stages[only].nodes.push(node.id);
      stageOfNode[node.id] = only;
      node.inputs.forEach((input, idx) => successors[input.node].push({ kind: 'local', port: input.port, node: node.id, input: idx }));
      continue;
    }

    const stage = newStage(node.parallelism ?? graph.parallelism);
    stage.nodes.push(node.id);
    stageOfNode[node.id] = stage.id;
    // A window has one input; when it pre-aggregates, its edge carries partials.
    const combine = combinesInput(node.spec);
    node.inputs.forEach((input, idx) => {
      addEdge({
        ...(combine && input.partitioning.kind === 'hash' ? { combine: true as const } : {}),
        from: { kind: 'stage', stage: stageOfNode[input.node], node: input.node, port: input.port },
        toStage: stage.id,
        toNode: node.id,
        toInput: idx,
        partitioning: input.partitioning.kind === 'hash' ? 'hash' : 'rebalance',
        key: input.partitioning.kind === 'hash' ? input.partitioning.key : undefined,
      });
    });
  }

  return {
    job: graph,
    stages: stages.map((s) => ({ ...s, name: stageName(graph, s.nodes) })),
    edges,
    stageOfNode,
    successors,
  };
}

function stageName(graph: JobGraph, nodes: number[]): string {
  return graph.nodes[nodes[0]].name;
}

/** Channels (one per upstream partition) that feed partition p of a stage through an edge. */
export function channelsInto(plan: PhysicalPlan, edge: StageEdge, partition: number): string[] {
  if (edge.from.kind === 'source') return [channelId(edge.id, partition)];
  const upstream = plan.stages[edge.from.stage].parallelism;
  const target = plan.stages[edge.toStage].parallelism;
  const out: string[] = [];
  for (let i = 0; i < upstream; i++) {
    if (edge.partitioning === 'hash' || i % target === partition) out.push(channelId(edge.id, i));
  }
  return out;
}

export function channelId(edge: number, fromPartition: number): string {
  return `${edge}:${fromPartition}`;
}

export { MAIN_PORT };
