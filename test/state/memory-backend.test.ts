import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { backendConformance } from './backend-conformance.ts';

backendConformance('InMemoryStateBackend', () => {
  const backend = new InMemoryStateBackend();
  return { open: () => backend };
});
