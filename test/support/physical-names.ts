/** The names AWS requires to be unique in an account and region, as a template gives them literally. */

/** Name properties of that kind (a role's inline policy names, stage and metric names are not). */
const UNIQUE = new Set(['QueueName', 'TableName', 'StateMachineName', 'BucketName', 'LogGroupName', 'FunctionName', 'RoleName', 'ManagedPolicyName', 'DashboardName', 'AlarmName', 'TopicName', 'Name']);

type Resources = Record<string, { Type: string; Properties?: Record<string, unknown> }>;

/** `Type.Property=value` for every literal unique name in the template's resources. */
export function physicalNames(resources: Resources): string[] {
  return Object.values(resources).flatMap((r) =>
    Object.entries(r.Properties ?? {})
      .filter(([k, v]) => UNIQUE.has(k) && typeof v === 'string')
      .map(([k, v]) => `${r.Type}.${k}=${String(v)}`),
  );
}

/** The names two lists share. */
export const sharedNames = (a: readonly string[], b: readonly string[]) => a.filter((n) => b.includes(n));
