/**
 * Operator chaining: each node of a stage gets, once at open, the functions its
 * emitted values go to, so that a record travels a stage as direct calls instead of a
 * record object, a route lookup and a dispatch per hop. Stateless operators (map,
 * filter, flatMap, pass-through) are fused: their entry function calls the user
 * function and the next node's entry directly with (value, timestamp). Other operators
 * are entered through the partition's dispatch, with a record built for them.
 *
 * Failure attribution is the same as one dispatch per hop: a throw inside a node's
 * entry that is not already a UserCodeError (a downstream node's, already attributed)
 * becomes the node's RecordFailedError, with the input record's location.
 */
import type { StreamRecord } from '../api/types.ts';
import { UserCodeError } from '../errors.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import { MAIN_PORT } from '../api/logical.ts';
import type { NodeRuntime, Push } from './context.ts';
import type { Outputs } from './outputs.ts';

const drop: Push = () => {};

/** What chain building needs from the partition. */
export interface ChainHost {
  readonly outputs: Outputs;
  /** The generic entry: a record into the node's operator. */
  dispatch(n: NodeRuntime, rec: StreamRecord, input: number): void;
  /** The error to throw for a non-UserCodeError thrown while node n handled value. */
  failure(n: NodeRuntime, value: unknown, cause: unknown): Error;
}

/**
 * Sets `emitters`, `emitMain` and `entry` of every node. `order` is topological, so
 * walking it backwards builds each node's successors before the node itself.
 */
export function buildChains(plan: PhysicalPlan, order: readonly NodeRuntime[], nodes: ReadonlyMap<number, NodeRuntime>, host: ChainHost): void {
  for (let i = order.length - 1; i >= 0; i--) {
    const n = order[i];
    const spec = n.node.spec;
    n.emitters.clear();
    if (spec.kind === 'sink') {
      const outputs = host.outputs;
      const slot = outputs.sinkSlot(n.node.name);
      n.emitMain = (value) => outputs.pushTo(slot, value);
    } else {
      for (const [port, succ] of n.routes) {
        const targets = succ.map((s): Push => {
          if (s.kind === 'edge') return host.outputs.sender(plan.edges[s.edge]);
          return entryOf(nodes.get(s.node)!, s.input, host);
        });
        n.emitters.set(port, fanOut(targets));
      }
      n.emitMain = n.emitters.get(MAIN_PORT) ?? drop;
    }
    n.entry = fusedEntry(n, host);
  }
}

/** The entry of node m for its input `input`: fused for stateless nodes, else a dispatch. */
function entryOf(m: NodeRuntime, input: number, host: ChainHost): Push {
  if (m.entry) return m.entry;
  return (value, timestamp) => host.dispatch(m, { value, timestamp }, input);
}

function fanOut(targets: Push[]): Push {
  if (targets.length === 0) return drop;
  if (targets.length === 1) return targets[0];
  if (targets.length === 2) {
    const [a, b] = targets;
    return (value, timestamp) => {
      a(value, timestamp);
      b(value, timestamp);
    };
  }
  return (value, timestamp) => {
    for (const t of targets) t(value, timestamp);
  };
}

/** A direct entry for stateless nodes (undefined for the others). */
function fusedEntry(n: NodeRuntime, host: ChainHost): Push | undefined {
  const spec = n.node.spec;
  const emit = n.emitMain;
  switch (spec.kind) {
    case 'source':
    case 'union':
    case 'sink':
      return (value, timestamp) => {
        n.recordsIn++;
        try {
          emit(value, timestamp);
        } catch (e) {
          throw e instanceof UserCodeError ? e : host.failure(n, value, e);
        }
      };
    case 'map': {
      const fn = spec.fn;
      return (value, timestamp) => {
        n.recordsIn++;
        try {
          emit(fn(value), timestamp);
        } catch (e) {
          throw e instanceof UserCodeError ? e : host.failure(n, value, e);
        }
      };
    }
    case 'filter': {
      const fn = spec.fn;
      return (value, timestamp) => {
        n.recordsIn++;
        try {
          if (fn(value)) emit(value, timestamp);
        } catch (e) {
          throw e instanceof UserCodeError ? e : host.failure(n, value, e);
        }
      };
    }
    case 'flatMap': {
      const fn = spec.fn;
      return (value, timestamp) => {
        n.recordsIn++;
        try {
          for (const out of fn(value)) emit(out, timestamp);
        } catch (e) {
          throw e instanceof UserCodeError ? e : host.failure(n, value, e);
        }
      };
    }
    default:
      return undefined;
  }
}
