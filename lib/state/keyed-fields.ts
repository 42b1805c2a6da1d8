/**
 * The raw keyed state of the key an operator is processing, as its context exposes it:
 * what the typed handles (handles.ts) are built on. The operator contract
 * (lib/operators/contract.ts) extends it, so the handles need nothing of the runtime.
 */
import type { Clock } from '../api/types.ts';
import type { LogicalNode } from '../api/logical.ts';

export interface KeyedFields {
  readonly node: LogicalNode;
  readonly clock: Clock;

  /** Raw keyed state of the current key: fields are the operator's own naming. */
  stateGet(field: string): unknown;
  /**
   * The field's value without stateGet's copy, for reading only and only in this batch:
   * changing it, or anything it holds, would change committed state outside the batch (and
   * survive its abort), and a list may grow in place at later commits.
   */
  statePeek(field: string): unknown;
  stateSet(field: string, value: unknown): void;
  stateDelete(field: string): void;
  /**
   * Add a value at the end of the list in a field (absent: an empty list); returns the
   * list's new length. As stateSet(field, [...(stateGet(field) ?? []), value]), without
   * copying the list per call.
   */
  stateAppend(field: string, value: unknown): number;
  /** Live fields of the current key whose names start with prefix, sorted by name. */
  stateFields(prefix: string): [string, unknown][];
}
