// The commit a source archive was made from, which `git archive` writes in (export-subst), for
// buildInfo() in version.ts.
/**
 * The commit a source archive was made from: `git archive` (the release's export of a commit)
 * writes it in place of the placeholder, as .gitattributes asks with `export-subst`. In a git
 * checkout the placeholder stays, and `buildInfo()` (version.ts) asks git instead.
 */
export const ARCHIVED_COMMIT = "$Format:%H$";
