/** Where SluiceJob bundles from: the job module and the project around it, or an error saying what to give. */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findLockFile, findProject } from '../../infra/project.ts';
import { SluiceJob } from '../../infra/sluice-job.ts';
import { App, Stack } from 'aws-cdk-lib';
import { job } from '../../examples/nexmark/q5.ts';

function project(lock: string | undefined): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-project-'));
  mkdirSync(join(dir, 'jobs'));
  writeFileSync(join(dir, 'jobs/orders.ts'), 'export default {};\n');
  if (lock) writeFileSync(join(dir, lock), '{}');
  return dir;
}

describe('the project a job is bundled from', () => {
  it('is the directory of the nearest lock file above the job module', () => {
    const dir = project('package-lock.json');
    expect(findProject({ jobModule: join(dir, 'jobs/orders.ts') })).toEqual({ jobModule: join(dir, 'jobs/orders.ts'), projectRoot: dir, depsLockFilePath: join(dir, 'package-lock.json') });
    const yarn = project('yarn.lock');
    expect(findLockFile(join(yarn, 'jobs'))).toBe(join(yarn, 'yarn.lock'));
  });

  it('says what to do when there is no lock file, no module, or a module outside the project', () => {
    const bare = project(undefined);
    // A temporary directory may sit under a directory with a lock file of its own; only the message matters then.
    if (findLockFile(bare) === undefined) expect(() => findProject({ jobModule: join(bare, 'jobs/orders.ts') })).toThrow(/depsLockFilePath: expected a lock file .* run `npm install` in the project first/);
    expect(() => findProject({ jobModule: join(bare, 'jobs/missing.ts') })).toThrow(/jobModule: expected an existing job module file, received .*missing\.ts/);
    expect(() => findProject({ jobModule: join(bare, 'jobs') })).toThrow(/jobModule: expected an existing job module file/);
    const other = project('package-lock.json');
    expect(() => findProject({ jobModule: join(bare, 'jobs/orders.ts'), projectRoot: other, depsLockFilePath: join(other, 'package-lock.json') })).toThrow(/jobModule: expected a file inside the project root/);
  });

  it('SluiceJob without a jobModule fails at synth, naming the prop (it would deploy code that is not the job)', () => {
    const stack = new Stack(new App(), 'T');
    expect(() => new SluiceJob(stack, 'Job', { job } as never)).toThrow(/jobModule: expected the path of the module that exports the job/);
  });
});
