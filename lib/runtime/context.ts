/** The operator context: binds an operator to its partition, current key, state and timers. */
import { type Clock, type Key, keyFromString, keyToString } from '../api/types.ts';
import { InvariantError } from '../errors.ts';
import type { PhysicalPlan, Successor } from '../graph/compile.ts';
import { createOperator } from '../operators/registry.ts';
import { keyGroupOfString } from '../graph/keygroups.ts';
import { type LogicalNode, MAIN_PORT } from '../graph/logical.ts';
import type { StateTxn } from '../state/txn.ts';
import type { OperatorContext, StreamOperator, TimeDomain } from './operator.ts';
import type { Push } from './chain.ts';
import { TimerQueue } from './timers.ts';

export interface NodeRuntime {
  readonly node: LogicalNode;
  readonly ctx: NodeContext;
  op: StreamOperator;
  readonly routes: Map<string, Successor[]>;
  readonly timers: { event: TimerQueue; processing: TimerQueue };
  recordsIn: number;
  /** Where emitted values go, per output port (chain.ts). */
  readonly emitters: Map<string, Push>;
  emitMain: Push;
  /** Stateless nodes: the fused entry that replaces a dispatch (chain.ts). */
  entry: Push | undefined;
}

/** What a context needs from its partition runtime. */
export interface ContextHost {
  readonly scope: { readonly partition: number };
  readonly stage: { readonly parallelism: number };
  readonly clock: Clock;
  readonly watermark: number;
  readonly stateTxn: StateTxn;
}

/** A node of a partition: its context, operator, routes and timers (entries are set by buildChains). */
export function newNodeRuntime(plan: PhysicalPlan, node: LogicalNode, host: ContextHost): NodeRuntime {
  const routes = new Map<string, Successor[]>();
  for (const s of plan.successors[node.id]) {
    const list = routes.get(s.port) ?? [];
    list.push(s);
    routes.set(s.port, list);
  }
  const rt: NodeRuntime = {
    node,
    ctx: undefined as unknown as NodeContext,
    op: undefined as unknown as StreamOperator,
    routes,
    timers: { event: new TimerQueue(), processing: new TimerQueue() },
    recordsIn: 0,
    emitters: new Map(),
    emitMain: () => {},
    entry: undefined,
  };
  (rt as { ctx: NodeContext }).ctx = new NodeContext(host, rt, plan.job.maxParallelism);
  rt.op = createOperator(rt.ctx);
  return rt;
}

export function entityId(operator: string, keyString: string): string {
  return `${operator}\u0001${keyString}`;
}

export class NodeContext implements OperatorContext {
  private key: Key | undefined;
  private keyString = '';
  private kg = 0;
  private entity = '';
  readonly node: LogicalNode;
  readonly partition: number;
  readonly parallelism: number;
  readonly clock: Clock;
  private readonly maxP: number;

  constructor(
    private readonly rt: ContextHost,
    private readonly n: NodeRuntime,
    maxParallelism: number,
  ) {
    this.maxP = maxParallelism;
    this.node = n.node;
    this.partition = rt.scope.partition;
    this.parallelism = rt.stage.parallelism;
    this.clock = rt.clock;
  }

  watermark(): number {
    return this.rt.watermark;
  }

  currentKey(): Key {
    if (this.key === undefined) throw new InvariantError(`operator "${this.node.name}" asked for a key outside a keyed context`);
    return this.key;
  }

  setCurrentKey(key: Key): void {
    if (key === this.key) return;
    const ks = keyToString(key);
    this.key = key;
    this.keyString = ks;
    this.kg = keyGroupOfString(ks, this.maxP);
    this.entity = entityId(this.node.name, ks);
  }

  /**
   * @internal From a shuffled record: the sender computed the key's string form and key
   * group for routing (outputs.ts), and they travel with the record. The same outcome as
   * setCurrentKey(key), without computing them again.
   */
  setRoutedKey(key: Key, ks: string, kg: number): void {
    if (key === this.key) return;
    this.key = key;
    if (ks === this.keyString) return;
    this.keyString = ks;
    this.kg = kg;
    this.entity = entityId(this.node.name, ks);
  }

  /** @internal From a timer: the key's string form and key group are stored with it. */
  setCurrentKeyString(ks: string, kg: number): void {
    if (ks === this.keyString && this.key !== undefined) return;
    this.keyString = ks;
    this.key = keyFromString(ks);
    this.kg = kg;
    this.entity = entityId(this.node.name, ks);
  }

  stateGet(field: string): unknown {
    return this.rt.stateTxn.get(this.kg, this.entity, field);
  }
  stateSet(field: string, value: unknown): void {
    this.rt.stateTxn.set(this.kg, this.entity, field, value);
  }
  stateDelete(field: string): void {
    this.rt.stateTxn.delete(this.kg, this.entity, field);
  }
  stateFields(prefix: string): [string, unknown][] {
    return this.rt.stateTxn.fields(this.kg, this.entity, prefix);
  }

  registerTimer(domain: TimeDomain, time: number, ns = ''): void {
    this.n.timers[domain].register({ node: this.node.id, domain, time, kg: this.kg, key: this.keyString, ns });
  }
  deleteTimer(domain: TimeDomain, time: number, ns = ''): void {
    this.n.timers[domain].delete({ node: this.node.id, domain, time, kg: this.kg, key: this.keyString, ns });
  }

  emit(value: unknown, timestamp: number, port: string = MAIN_PORT): void {
    if (port === MAIN_PORT) this.n.emitMain(value, timestamp);
    else this.n.emitters.get(port)?.(value, timestamp);
  }
}
