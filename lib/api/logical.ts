/**
 * The logical job graph the API builds: operators (nodes) and the edges between
 * them. The compiler (lib/graph/compile.ts) turns it into stages. Pure data plus user functions.
 */
import type {
  AggregateFunction,
  CoGroupFunction,
  IntervalJoinFunction,
  JoinFunction,
  KeyedCoProcessFunction,
  KeyedProcessFunction,
  ProcessWindowFunction,
  ReduceFunction,
  WindowResultFunction,
} from './functions.ts';
import { JobDefinitionError } from '../errors.ts';
import type { Sink } from './sinks.ts';
import type { SourceDef } from './sources.ts';
import type { KeySelector } from './types.ts';
import type { WindowAssigner } from './windows.ts';

export const MAIN_PORT = 'main';

export type Partitioning = { readonly kind: 'forward' } | { readonly kind: 'hash'; readonly key: KeySelector<any> };

export interface LogicalInput {
  readonly node: number;
  /** Output port of the upstream node: MAIN_PORT or a side-output tag id. */
  readonly port: string;
  readonly partitioning: Partitioning;
}

export type WindowFunctionSpec =
  | { readonly kind: 'aggregate'; readonly agg: AggregateFunction<any, any, any>; readonly project?: WindowResultFunction<any, any, any> }
  | { readonly kind: 'reduce'; readonly reduce: ReduceFunction<any>; readonly project?: WindowResultFunction<any, any, any> }
  | { readonly kind: 'process'; readonly process: ProcessWindowFunction<any, any, any> };

export type NodeSpec =
  | { readonly kind: 'source'; readonly source: SourceDef<any> }
  | { readonly kind: 'map'; readonly fn: (value: any) => unknown }
  | { readonly kind: 'filter'; readonly fn: (value: any) => boolean }
  | { readonly kind: 'flatMap'; readonly fn: (value: any) => Iterable<unknown> }
  | { readonly kind: 'union' }
  | { readonly kind: 'keyedProcess'; readonly fn: KeyedProcessFunction<any, any, any, any> }
  | {
      readonly kind: 'window';
      readonly assigner: WindowAssigner;
      readonly allowedLatenessMs: number;
      readonly lateTag?: string;
      readonly fn: WindowFunctionSpec;
      /**
       * Pre-aggregate records of one key and pane before the shuffle where that applies
       * (lib/operators/window-combiner.ts). Default true; false: every record crosses it.
       */
      readonly preAggregate?: boolean;
    }
  | {
      readonly kind: 'windowJoin';
      readonly assigner: WindowAssigner;
      readonly fn: { readonly kind: 'pairs'; readonly join: JoinFunction<any, any, any> } | { readonly kind: 'coGroup'; readonly coGroup: CoGroupFunction<any, any, any, any>; readonly inner: boolean };
    }
  | { readonly kind: 'intervalJoin'; readonly lowerMs: number; readonly upperMs: number; readonly fn: IntervalJoinFunction<any, any, any, any> }
  | { readonly kind: 'coProcess'; readonly fn: KeyedCoProcessFunction<any, any, any, any, any> }
  | { readonly kind: 'sink'; readonly sink: Sink<any> };

export type NodeKind = NodeSpec['kind'];

/** Operators that need keyed (hash-partitioned) inputs. */
export const KEYED_KINDS: ReadonlySet<NodeKind> = new Set(['keyedProcess', 'window', 'windowJoin', 'intervalJoin', 'coProcess']);

export interface LogicalNode {
  readonly id: number;
  name: string;
  /** True when the user named it; only user names must be unique across the job... and all names are. */
  userNamed: boolean;
  /**
   * The operator's state identity (Flink's uid): keyed state, timers and savepoints are
   * stored under it. Unset: the name is the identity (stateIdOf), so renaming an
   * operator keeps its state only when a uid was set.
   */
  uid?: string;
  readonly spec: NodeSpec;
  readonly inputs: readonly LogicalInput[];
  parallelism?: number;
}

/** The identity an operator's state is stored and restored under: its uid, or else its name. */
export function stateIdOf(node: Pick<LogicalNode, 'name' | 'uid'>): string {
  return node.uid ?? node.name;
}

export interface JobOptions {
  /** Partitions per stage. Default: 2. */
  readonly parallelism?: number;
  /** Number of key groups; fixed for the life of the job's state. Default: 128. */
  readonly maxParallelism?: number;
}

/** Parallelism to run a job at instead of what it declares (`sluice run|dev|restore --parallelism`). */
export interface ParallelismOverride {
  /** The job's default: the parallelism of every operator that does not set its own. */
  readonly default?: number;
  /** By operator name: that operator's parallelism, also where it sets its own. */
  readonly operators?: Readonly<Record<string, number>>;
}

export class JobGraph {
  readonly nodes: LogicalNode[] = [];
  readonly parallelism: number;
  readonly maxParallelism: number;

  constructor(
    readonly name: string,
    options: JobOptions = {},
  ) {
    this.parallelism = options.parallelism ?? 2;
    this.maxParallelism = options.maxParallelism ?? 128;
  }

  addNode(spec: NodeSpec, inputs: LogicalInput[], name?: string): LogicalNode {
    const id = this.nodes.length;
    const node: LogicalNode = {
      id,
      name: name ?? `${spec.kind}-${id}`,
      userNamed: name !== undefined,
      spec,
      inputs,
    };
    this.nodes.push(node);
    return node;
  }

  /**
   * A copy at other parallelisms: the same operators, names, state identities and
   * maxParallelism (key groups), so its checkpoints' and savepoints' state restores into
   * it by key group. An operator name the job does not have is an error naming those it has.
   */
  withParallelism(o: ParallelismOverride): JobGraph {
    const names = this.nodes.map((n) => n.name);
    for (const name of Object.keys(o.operators ?? {})) {
      if (!names.includes(name)) throw new JobDefinitionError(name, `a parallelism for an operator of job "${this.name}" (${names.join(', ')})`, 'no such operator');
    }
    const copy = new JobGraph(this.name, { parallelism: o.default ?? this.parallelism, maxParallelism: this.maxParallelism });
    for (const n of this.nodes) copy.nodes.push(o.operators?.[n.name] === undefined ? { ...n } : { ...n, parallelism: o.operators[n.name] });
    return copy;
  }

  sources(): LogicalNode[] {
    return this.nodes.filter((n) => n.spec.kind === 'source');
  }

  sinks(): LogicalNode[] {
    return this.nodes.filter((n) => n.spec.kind === 'sink');
  }
}
