import type { NodeSpec } from '../graph/logical.ts';
import type { OperatorContext, StreamOperator } from '../runtime/operator.ts';
// Placeholder until the window join operator lands (same session).
export function windowJoinOperator(_ctx: OperatorContext, _spec: Extract<NodeSpec, { kind: 'windowJoin' }>): StreamOperator {
  throw new Error('window join operator not implemented yet');
}
