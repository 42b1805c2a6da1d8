#!/usr/bin/env node
// The `sluice` command. An installed package runs its compiled JavaScript (dist/); Sluice's
// own repository, where the TypeScript sources sit beside this file, runs them through tsx.
import { existsSync } from 'node:fs';

const sources = new URL('../lib/cli/main.ts', import.meta.url);
if (existsSync(sources)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(sources.href);
} else {
  await import(new URL('../dist/lib/cli/main.js', import.meta.url).href);
}
