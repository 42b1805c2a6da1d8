#!/usr/bin/env -S node --no-parallel-scavenge --max-semi-space-size=32
// Thin launcher: runs the TypeScript CLI through tsx so users need no build step, with
// the V8 flags of lib/cli/node-flags.ts (`node bin/sluice.js` runs without them).
import { register } from 'tsx/esm/api';
register();
await import('../lib/cli/main.ts');
