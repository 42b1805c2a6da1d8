import type { NodeSpec } from '../graph/logical.ts';
import type { OperatorContext, StreamOperator } from '../runtime/operator.ts';
// Placeholder until the interval join operator lands (same session).
export function intervalJoinOperator(_ctx: OperatorContext, _spec: Extract<NodeSpec, { kind: 'intervalJoin' }>): StreamOperator {
  throw new Error('interval join operator not implemented yet');
}
