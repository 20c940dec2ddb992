/**
 * Reading a request file. Kept apart from the Temporal client so that `flotilla validate` and
 * friends load no more than zod and yaml, and answer at once.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { type LeaderRequest, RequestError, deprecatedFields, parseLeaderRequest } from '../contracts/request';

/** A validated request, and one line per deprecated field name it used (still accepted). */
export interface LoadedRequest {
  request: LeaderRequest;
  deprecated: string[];
}

/** Reads and validates a request file; see loadRequest. */
export function loadRequestFile(file: string): LeaderRequest {
  return loadRequest(file).request;
}

/**
 * Reads a request from JSON or YAML and validates it. A local repository path may be relative:
 * it is resolved against the request file's directory, since the worker runs elsewhere.
 */
export function loadRequest(file: string): LoadedRequest {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new RequestError([`cannot read request file ${file}: ${(err as Error).message}`]);
  }
  let raw: unknown;
  try {
    raw = /\.ya?ml$/i.test(file) ? YAML.parse(text) : JSON.parse(text);
  } catch (err) {
    throw new RequestError([
      `${file} is not valid ${/\.ya?ml$/i.test(file) ? 'YAML' : 'JSON'}: ${(err as Error).message}`,
    ]);
  }
  const request = parseLeaderRequest(resolveLocalRepo(raw, path.dirname(path.resolve(file))));
  return { request, deprecated: deprecatedFields(raw) };
}

function resolveLocalRepo(raw: unknown, dir: string): unknown {
  const repo = (raw as { repo?: { url?: unknown } } | null)?.repo;
  if (!repo || typeof repo.url !== 'string') return raw;
  const url = repo.url;
  if (/^\.{1,2}(\/|$)/.test(url) || (!url.includes(':') && !url.startsWith('/') && existsSync(path.join(dir, url)))) {
    return { ...(raw as object), repo: { ...repo, url: path.resolve(dir, url) } };
  }
  return raw;
}
