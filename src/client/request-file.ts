/**
 * Reading a request file. Kept apart from the Temporal client so that `flotilla validate` and
 * friends load no more than zod and yaml, and answer at once.
 */
import { closeSync, constants, existsSync, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import {
  type LeaderRequest,
  MAX_CHARS,
  RequestError,
  deprecatedFields,
  parseLeaderRequest,
} from '../contracts/request';

/**
 * The most a request file may hold, in bytes: a request at its size limit (characters of JSON),
 * each character up to four bytes of UTF-8, which leaves YAML room for indentation and comments.
 */
export const MAX_REQUEST_FILE_BYTES = 4 * MAX_CHARS.request;

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
export function loadRequest(file: string, fields: Record<string, unknown> = {}): LoadedRequest {
  const text = readRequestText(file);
  const yaml = /\.ya?ml$/i.test(file);
  let raw: unknown;
  try {
    raw = yaml ? parseYaml(text) : parseJson(text);
  } catch (err) {
    throw new RequestError([`${file} is not valid ${yaml ? 'YAML' : 'JSON'}: ${(err as Error).message}`]);
  }
  // Fields given on the command line (`start --issue`) take the place of the file's.
  const given = raw !== null && typeof raw === 'object' && !Array.isArray(raw) ? { ...raw, ...fields } : raw;
  const request = parseLeaderRequest(resolveLocalRepo(given, path.dirname(path.resolve(file))));
  return { request, deprecated: deprecatedFields(raw) };
}

/**
 * The file's text, refused unless it is a regular file of at most MAX_REQUEST_FILE_BYTES: a FIFO
 * would wait for a writer for ever, and a device such as /dev/zero never ends.
 */
function readRequestText(file: string): string {
  const refuse = (why: string) => new RequestError([`cannot read request file ${file}: ${why}`]);
  let fd: number;
  try {
    // Without O_NONBLOCK, opening a FIFO waits until something opens it for writing.
    fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    throw refuse((err as Error).message);
  }
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) throw refuse(`it is ${fileKind(stats)}, not a regular file`);
    const buffer = Buffer.alloc(MAX_REQUEST_FILE_BYTES + 1);
    let length = 0;
    let n: number;
    do {
      n = readSync(fd, buffer, length, buffer.length - length, null);
      length += n;
    } while (n > 0 && length < buffer.length);
    if (length > MAX_REQUEST_FILE_BYTES) throw refuse(`it is larger than ${MAX_REQUEST_FILE_BYTES} bytes`);
    return buffer.toString('utf8', 0, length);
  } finally {
    closeSync(fd);
  }
}

function fileKind(stats: Stats): string {
  if (stats.isDirectory()) return 'a directory';
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return 'a device';
  if (stats.isSocket()) return 'a socket';
  return 'not a file';
}

/** YAML that says exactly one thing: a duplicate key, or a tag nothing resolves (`!!js/function`), is an error. */
function parseYaml(text: string): unknown {
  const doc = YAML.parseDocument(text, { uniqueKeys: true });
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) throw problem;
  return doc.toJS();
}

/** JSON whose objects name each key once: JSON.parse would keep the last of two silently. */
function parseJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  const duplicate = duplicateKey(text);
  if (duplicate) throw new Error(`the key "${duplicate.key}" appears twice in one object (line ${duplicate.line})`);
  return value;
}

/** The first key named twice in one object of `text`, which is valid JSON. */
function duplicateKey(text: string): { key: string; line: number } | undefined {
  // One entry per open object (its keys so far) or array (null).
  const open: (Set<string> | null)[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '{') open.push(new Set());
    else if (c === '[') open.push(null);
    else if (c === '}' || c === ']') open.pop();
    else if (c === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      let next = end + 1;
      while (' \t\r\n'.includes(text[next])) next++;
      const keys = open.at(-1);
      if (keys && text[next] === ':') {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (keys.has(key)) return { key, line: text.slice(0, i).split('\n').length };
        keys.add(key);
      }
      i = end;
    }
  }
  return undefined;
}

function resolveLocalRepo(raw: unknown, dir: string): unknown {
  const repo = (raw as { repo?: { url?: unknown } } | null)?.repo;
  // An empty URL is left for validation to refuse: joined to the directory, it would name the directory.
  if (!repo || typeof repo.url !== 'string' || repo.url === '') return raw;
  const url = repo.url;
  if (/^\.{1,2}(\/|$)/.test(url) || (!url.includes(':') && !url.startsWith('/') && existsSync(path.join(dir, url)))) {
    return { ...(raw as object), repo: { ...repo, url: path.resolve(dir, url) } };
  }
  return raw;
}
