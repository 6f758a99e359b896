// Light or dark: follows the system until the reader picks one, which this browser keeps.

const KEY = 'zodex.liveboard.theme';
const dark = window.matchMedia('(prefers-color-scheme: dark)');

function stored() {
  const value = localStorage.getItem(KEY);
  return value === 'light' || value === 'dark' ? value : null;
}

function apply() {
  const theme = stored() ?? (dark.matches ? 'dark' : 'light');
  document.documentElement.dataset.theme = theme;
  return theme;
}

export function initTheme(button) {
  const label = () => {
    const theme = document.documentElement.dataset.theme;
    button.title = `Switch to ${theme === 'dark' ? 'light' : 'dark'} theme`;
    button.setAttribute('aria-label', button.title);
  };
  apply();
  label();
  dark.addEventListener('change', () => {
    apply();
    label();
  });
  button.addEventListener('click', () => {
    const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
    localStorage.setItem(KEY, next);
    apply();
    label();
  });
}
