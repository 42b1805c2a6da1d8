import type { NodeSpec } from '../graph/logical.ts';
import type { OperatorContext, StreamOperator } from '../runtime/operator.ts';
// Placeholder until the window operator lands (same session).
export function windowOperator(_ctx: OperatorContext, _spec: Extract<NodeSpec, { kind: 'window' }>): StreamOperator {
  throw new Error('window operator not implemented yet');
}
