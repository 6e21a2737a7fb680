/**
 * READMEs are their authors' Markdown, which may hold any HTML. They are rendered with marked
 * and then sanitised with DOMPurify (no script, no event handler, no javascript: link, no form,
 * no frame), and the page's Content-Security-Policy would not run an inline script anyway.
 * Links open in a new tab without handing it this page (noopener, no referrer).
 */
import DOMPurify from 'dompurify';
import { marked } from 'marked';

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.getAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

export function renderMarkdown(text: string): string {
  const html = marked.parse(text, { async: false, gfm: true });
  return DOMPurify.sanitize(html, {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed'],
    FORBID_ATTR: ['style'],
  });
}
