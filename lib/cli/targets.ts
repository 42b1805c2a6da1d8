/**
 * Where `sluice run` runs a job. `embedded` (default): one process. `local-aws`: the
 * real Lambda handlers against local servers (target-local-aws.ts). `assembly`: the
 * bundles and IAM policies of a synthesized cloud assembly against local servers
 * (target-assembly.ts). Each is imported only when chosen.
 */
export const TARGETS = ['embedded', 'local-aws', 'assembly'] as const;
export type Target = (typeof TARGETS)[number];
