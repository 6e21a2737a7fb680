/**
 * The only file of the client that reads the environment (the repository's lint rule allows
 * it here alone). Everything else gets an env object handed in, so tests pass their own.
 */

export type Env = Readonly<Record<string, string | undefined>>;

/** The process's environment: the default when a client is built without `env`. */
export function processEnv(): Env {
  return process.env;
}

const first = (env: Env, names: readonly string[]): string | undefined => {
  for (const name of names) {
    const value = env[name]?.trim();
    if (value) return value;
  }
  return undefined;
};

/**
 * Address and key from the environment: our own names first, then the original service's,
 * which existing scripts and CI jobs already set. Empty values count as unset.
 */
export function fromEnv(env: Env): { baseUrl: string | undefined; apiKey: string | undefined } {
  return {
    baseUrl: first(env, ['ALGOHOST_API', 'ALGORITHMIA_API']),
    apiKey: first(env, ['ALGOHOST_API_KEY', 'ALGORITHMIA_API_KEY']),
  };
}
