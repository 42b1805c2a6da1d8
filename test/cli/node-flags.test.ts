import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { NODE_FLAGS } from '../../lib/cli/node-flags.ts';
import { ROOT } from './helpers.ts';

describe("the launchers' node flags", () => {
  it('bin/sluice.js is a plain node program (no V8 flags for users) and runs', async () => {
    const [shebang] = readFileSync(join(ROOT, 'bin/sluice.js'), 'utf8').split('\n');
    expect(shebang).toBe('#!/usr/bin/env node');
    const { stdout } = await promisify(execFile)(join(ROOT, 'bin/sluice.js'), ['--help'], { cwd: ROOT });
    expect(stdout).toContain('Usage: sluice');
  });

  it('npm start runs the demo with every flag of NODE_FLAGS', () => {
    const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start;
    expect(start).toBe(['tsx', ...NODE_FLAGS, 'lib/cli/main.ts', 'demo'].join(' '));
  });
});
