/** The user's job module, aliased by the bundler (infra/function.ts): its default export is a Job or (params) => Job. */
declare module 'sluice-job-module' {
  const job: unknown;
  export default job;
}
