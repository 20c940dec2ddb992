/** A variable with a value Flotilla cannot use; the message names the variable and says why. */
export class ConfigError extends Error {
  name = 'ConfigError';
}
