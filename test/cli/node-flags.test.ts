import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { NODE_FLAGS } from '../../lib/cli/node-flags.ts';
import { ROOT } from './helpers.ts';

describe("the launchers' node flags", () => {
  it('bin/sluice.js starts node with every flag of NODE_FLAGS through its shebang, and runs', async () => {
    const [shebang] = readFileSync(join(ROOT, 'bin/sluice.js'), 'utf8').split('\n');
    const words = shebang.replace(/^#!/, '').split(/\s+/);
    expect(words.slice(0, 3)).toEqual(['/usr/bin/env', '-S', 'node']);
    expect(words.slice(3)).toEqual([...NODE_FLAGS]);
    // Executed as a program (the shebang, not `node bin/sluice.js`): env -S must split the flags off.
    const { stdout } = await promisify(execFile)(join(ROOT, 'bin/sluice.js'), ['--help'], { cwd: ROOT });
    expect(stdout).toContain('Usage: sluice');
  });

  it('npm start runs the demo with every flag of NODE_FLAGS', () => {
    const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start;
    expect(start).toBe(['tsx', ...NODE_FLAGS, 'lib/cli/main.ts', 'demo'].join(' '));
  });
});
