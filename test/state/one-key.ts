/**
 * One key's state through an operator context's state methods, committed to the in-memory
 * store batch by batch as the runtime commits (by entity): for tests of handles and
 * operators that drive them without a partition.
 */
import type { KeyedFields } from '../../lib/state/keyed-fields.ts';
import { emptyProgress, type PartitionScope } from '../../lib/state/backend.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { entityId, StateTxn } from '../../lib/state/txn.ts';

export type KeyState = Pick<KeyedFields, 'stateGet' | 'statePeek' | 'stateSet' | 'stateDelete' | 'stateAppend' | 'stateFields'>;

/** Key 'k' (key group 0) of `operator`: its state methods, a commit, and the fields the store holds. */
export function oneKey(operator: string) {
  const scope: PartitionScope = { job: 'one-key', stage: 0, partition: 0 };
  const backend = new InMemoryStateBackend();
  const txn = new StateTxn(backend, scope);
  const entry = () => txn.overlay(operator).entry('k', 0);
  const state: KeyState = {
    stateGet: (f) => entry().read(f),
    statePeek: (f) => entry().peek(f),
    stateSet: (f, v) => entry().write(f, v),
    stateDelete: (f) => entry().write(f, undefined),
    stateAppend: (f, v) => entry().append(f, v),
    stateFields: (p) => entry().fields(p),
  };
  let version = 0;
  const commit = () => {
    const { writes, entities } = txn.changes();
    backend.commitSync({ scope, expectedVersion: version++, writes, ...(entities ? { entities } : {}), timerAdds: [], timerDeletes: [], progress: emptyProgress(), outbox: [] });
    txn.reset();
  };
  const stored = () => new Map(backend.peek(scope, 0, entityId(operator, 'k')) ?? []);
  return { state, commit, stored };
}
