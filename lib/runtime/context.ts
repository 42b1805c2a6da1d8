/** The operator context: binds an operator to its partition, current key, state and timers. */
import { type Clock, type Key, keyFromString, keyToString } from '../api/types.ts';
import { InvariantError } from '../errors.ts';
import type { PhysicalPlan, Successor } from '../graph/compile.ts';
import { createOperator } from '../operators/registry.ts';
import { keyGroupOfString } from '../graph/keygroups.ts';
import { type LogicalNode, MAIN_PORT, stateIdOf } from '../api/logical.ts';
import { type EntityEntry, entityId, type OperatorOverlay, type StateTxn } from '../state/txn.ts';
import type { OperatorContext, StreamOperator, TimeDomain } from '../operators/contract.ts';
import { TimerQueue } from './timers.ts';
import type { KeyHint, TimerHome } from './timer-nodes.ts';

/** Where a value goes: the next node's entry, an output edge, a sink, or several of them (chain.ts). */
export type Push = (value: unknown, timestamp: number) => void;

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
  /** The backend forgets deleted timers' entries: timer queues may reuse them (StateBackend.releasesTimerEntries). */
  readonly reusesTimerEntries?: boolean;
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
    timers: { event: timerQueue(node, 'event', host), processing: timerQueue(node, 'processing', host) },
    recordsIn: 0,
    emitters: new Map(),
    emitMain: () => {},
    entry: undefined,
  };
  (rt as { ctx: NodeContext }).ctx = new NodeContext(host, rt, plan.job.maxParallelism);
  rt.op = createOperator(rt.ctx);
  return rt;
}

export { entityId };

function timerQueue(node: LogicalNode, domain: TimeDomain, host: ContextHost): TimerQueue {
  const overlay = host.stateTxn.overlay(stateIdOf(node));
  // A key's timers are filed on its state entry (EntityEntry keeps the fields of a TimerHome).
  return new TimerQueue(
    { node: node.id, domain, entityOf: (key) => overlay.entityOf(key), homeOf: (key, kg, create) => overlay.timerHome(key, kg, create) as unknown as TimerHome | undefined },
    host.reusesTimerEntries === true,
  );
}

export class NodeContext implements OperatorContext {
  private key: Key | undefined;
  /** The key was set from a timer (its string form): parsed on the first currentKey(). */
  private keyFromTimer = false;
  private keyString = '';
  private kg = 0;
  /** The current key's state entry in this batch (undefined: look it up on first use). */
  private entry: EntityEntry | undefined = undefined;
  private readonly overlay: OperatorOverlay;
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
    this.overlay = rt.stateTxn.overlay(stateIdOf(n.node));
  }

  watermark(): number {
    return this.rt.watermark;
  }

  currentKey(): Key {
    if (this.keyFromTimer) {
      const e = this.entry;
      this.key = e !== undefined && e.keyValue !== undefined && e.key === this.keyString ? e.keyValue : keyFromString(this.keyString);
      this.keyFromTimer = false;
    }
    if (this.key === undefined) throw new InvariantError(`operator "${this.node.name}" asked for a key outside a keyed context`);
    return this.key;
  }

  setCurrentKey(key: Key): void {
    if (key === this.key) return;
    const ks = keyToString(key);
    this.key = key;
    this.keyFromTimer = false;
    this.keyString = ks;
    this.kg = keyGroupOfString(ks, this.maxP);
    this.entry = undefined;
  }

  /**
   * @internal From a shuffled record: the sender computed the key's string form and key
   * group for routing (outputs.ts), and they travel with the record. The same outcome as
   * setCurrentKey(key), without computing them again.
   */
  setRoutedKey(key: Key, ks: string, kg: number): void {
    if (key === this.key) return;
    this.key = key;
    this.keyFromTimer = false;
    if (ks === this.keyString) return;
    this.keyString = ks;
    this.kg = kg;
    this.entry = undefined;
  }

  /**
   * @internal From a timer: the key's string form and key group are stored with it.
   * `hint`: the entry this context registered the key's timer with (TimerQueue.firedHint),
   * taken as the key's entry if state() finds it still is.
   */
  setCurrentKeyString(ks: string, kg: number, hint?: KeyHint): void {
    if (ks === this.keyString && (this.key !== undefined || this.keyFromTimer)) return;
    this.keyString = ks;
    // Parsed only if asked for (currentKey): most timer callbacks read state, not the key.
    this.key = undefined;
    this.keyFromTimer = true;
    this.kg = kg;
    this.entry = hint as unknown as EntityEntry | undefined;
  }

  /**
   * The current key's entry (this.entry is the current key's or undefined: a key switch
   * clears it, a timer's hint is its key's): kept across calls and batches for one key,
   * looked up again after a key switch without a hint, or once its overlay forgot it
   * (`live`: the key's state went, a sweep). A kept entry's first use in a batch skips the
   * look-up by key (a window's firing: its key's entry comes with the timer).
   */
  private state(): EntityEntry {
    const e = this.entry;
    // The key's entry while live (the overlay reuses forgotten entries for other keys).
    if (e !== undefined && e.key === this.keyString) {
      if (e.batch === this.overlay.batch) return e;
      if (e.live) return this.overlay.resume(e);
    }
    const fresh = (this.entry = this.overlay.entry(this.keyString, this.kg, this.keyFromTimer ? undefined : this.key));
    // A primitive key is kept for the key's timers, as its string would parse (-0 as 0); an
    // object key is parsed anew for each (the record's object stays the user's).
    const k = this.key;
    if (!this.keyFromTimer && (typeof k === 'number' || typeof k === 'string')) fresh.keyValue = k === 0 ? 0 : k;
    return fresh;
  }

  /** The current key's entry if this context holds a live one (a registration's hint: see TimerQueue.registerAt). */
  private heldEntry(): EntityEntry | undefined {
    const e = this.entry;
    return e !== undefined && e.live && e.key === this.keyString ? e : undefined;
  }

  stateGet(field: string): unknown {
    return this.state().read(field);
  }
  statePeek(field: string): unknown {
    return this.state().peek(field);
  }
  stateSet(field: string, value: unknown): void {
    this.state().write(field, value);
  }
  stateDelete(field: string): void {
    this.state().write(field, undefined);
  }
  stateAppend(field: string, value: unknown): number {
    return this.state().append(field, value);
  }
  stateFields(prefix: string): [string, unknown][] {
    return this.state().fields(prefix);
  }

  registerTimer(domain: TimeDomain, time: number, ns = ''): void {
    // The current key's entry, when state was used, names the entity: the timer queue keeps it.
    this.n.timers[domain].registerAt(time, this.keyString, this.kg, ns, this.heldEntry() as unknown as KeyHint | undefined);
  }
  deleteTimer(domain: TimeDomain, time: number, ns = ''): void {
    this.n.timers[domain].deleteAt(time, this.keyString, ns);
  }

  emit(value: unknown, timestamp: number, port: string = MAIN_PORT): void {
    if (port === MAIN_PORT) this.n.emitMain(value, timestamp);
    else this.n.emitters.get(port)?.(value, timestamp);
  }
}
