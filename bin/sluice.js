#!/usr/bin/env node
// Thin launcher: runs the TypeScript CLI through tsx so users need no build step.
import { register } from 'tsx/esm/api';
register();
await import('../lib/cli/main.ts');
