/**
 * Where `sluice run` and `sluice dev` run a job. `embedded` (default): one process.
 * `local-aws`: the real Lambda handlers against local servers (target-local-aws.ts,
 * imported only when chosen: the AWS SDK adds about a second to the CLI's start).
 */
export const TARGETS = ['embedded', 'local-aws'] as const;
export type Target = (typeof TARGETS)[number];
