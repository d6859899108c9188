/*
 * tide.c - the tide executable: LuaJIT with Tide loaded as the global `tide`.
 * `tide script.lua args` runs a script as `lua` does, `-e` runs code, and with
 * no script (or with -i) it starts the REPL. This file only gives repl/repl.lua
 * what Lua cannot do alone: line editing, history and completion callbacks
 * (libedit), a monotonic clock, and Ctrl-C (a Lua hook, plus tide_set_interrupt
 * for waits on the engine). Evaluating, printing and completing are repl.lua's.
 */
#include "tide_lua.h"

#include <editline/readline.h>
#include <lauxlib.h>
#include <luajit.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char * progname = "tide";
static lua_State *  gL;

static void usage(FILE * f) {
    fprintf(f,
            "usage: %s [options] [script [args...]]\n"
            "  -e code        run code (Tide is loaded as the global `tide`)\n"
            "  -l name        require library `name` into a global named by its last part\n"
            "  -i             enter the REPL after running the script and -e code\n"
            "  -v, --version  print the versions of Tide and LuaJIT\n"
            "  -h, --help     print this help\n"
            "  --             stop handling options\n"
            "  -              run standard input as a script\n"
            "With no script and no -e, the REPL starts when standard input is a\n"
            "terminal (else standard input runs as a script). `arg` is set as lua sets it.\n"
            "Environment: TIDE_HISTORY, the REPL's history file (default ~/.tide_history).\n",
            progname);
}

static void message(const char * msg) {
    fprintf(stderr, "%s: %s\n", progname, msg);
    fflush(stderr);
}

/* -- Ctrl-C ------------------------------------------------------------------ */
/* While Lua code runs, SIGINT sets a hook that raises "interrupted" at the next
 * Lua instruction and asks Tide's waits to stop. A compiled trace never reaches
 * a hook: the REPL runs typed code in the interpreter, and a third press with
 * no effect ends the process. At the prompt, SIGINT only marks the line. */

enum { MODE_OFF, MODE_PROMPT, MODE_EVAL };
static volatile sig_atomic_t sig_mode, presses, prompt_sigint;
static int                   idle_mode = MODE_OFF;   /* between evaluations: MODE_PROMPT in the REPL */

static void stop_hook(lua_State * L, lua_Debug * ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    presses = 0;
    luaL_error(L, "interrupted");
}

static void on_sigint(int sig) {
    (void)sig;
    if (sig_mode == MODE_PROMPT) {
        prompt_sigint = 1;
        return;
    }
    presses++;
    tide_set_interrupt(1);
    lua_sethook(gL, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    if (presses == 2) {
        static const char msg[] = "\n(still running compiled code or C: press Ctrl-C again to quit)\n";
        ssize_t r = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)r;
    } else if (presses >= 3) {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
    }
}

static void set_mode(int mode) {
    if (mode == MODE_EVAL) {
        presses = 0;
        tide_set_interrupt(0);
    }
    if (mode == MODE_OFF) mode = idle_mode;   /* the REPL never dies of a Ctrl-C between lines */
    sig_mode = mode;
    if (mode != MODE_EVAL) lua_sethook(gL, NULL, 0, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = mode == MODE_OFF ? SIG_DFL : on_sigint;
    sa.sa_flags   = 0;   /* no SA_RESTART: a read at the prompt returns on Ctrl-C */
    sigaction(SIGINT, &sa, NULL);
}

/* -- running chunks ------------------------------------------------------------ */

/* Prints and pops the error on top of the stack. */
static void report(lua_State * L) {
    const char * msg = lua_tostring(L, -1);
    if (!lua_isnil(L, -1)) message(msg ? msg : "(error object is not a string)");   /* nil: quiet, as luajit */
    lua_pop(L, 1);
}

static int traceback(lua_State * L) {
    const char * msg = lua_tostring(L, 1);
    if (!msg) {   /* an error object that is not a string goes through as it is, as in luajit */
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        lua_settop(L, 1);
        return 1;
    }
    lua_getglobal(L, "debug");
    lua_getfield(L, -1, "traceback");
    lua_pushstring(L, msg);
    lua_pushinteger(L, 2);
    lua_call(L, 2, 1);
    return 1;
}

/* Calls the function below nargs arguments, reporting an error with a traceback. */
static int docall(lua_State * L, int nargs) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    set_mode(MODE_EVAL);
    int st = lua_pcall(L, nargs, 0, base);
    set_mode(MODE_OFF);
    lua_remove(L, base);
    if (st != 0) report(L);
    return st;
}

static int dochunk(lua_State * L, int st) {
    if (st != 0) {
        report(L);
        return st;
    }
    return docall(L, 0);
}

static int dolibrary(lua_State * L, const char * name) {
    lua_getglobal(L, "require");
    lua_pushstring(L, name);
    int base = lua_gettop(L) - 1;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    int st = lua_pcall(L, 1, 1, base);
    lua_remove(L, base);
    if (st != 0) {
        report(L);
        return st;
    }
    const char * dot = strrchr(name, '.');   /* -l a.b sets the global b */
    lua_setglobal(L, dot ? dot + 1 : name);
    return 0;
}

static int doscript(lua_State * L, int argc, char ** argv, int script) {
    const char * fname = strcmp(argv[script], "-") == 0 ? NULL : argv[script];
    int st = luaL_loadfile(L, fname);
    if (st != 0) return dochunk(L, st);
    int nargs = argc - script - 1;
    luaL_checkstack(L, nargs + 3, "too many arguments to script");
    for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
    return docall(L, nargs);
}

/* -- what repl.lua gets: the `sys` table ----------------------------------------- */

static int    completer_ref = LUA_NOREF;
static int    is_tty;
static char   history_path[4096];

/* libedit's completion hook: asks repl.lua's completer for the words that may
 * replace `text` (the word before the cursor, with '.', ':' and '_' in it). */
static char ** complete(const char * text, int start, int end) {
    (void)start;
    rl_attempted_completion_over = 1;   /* never fall back to file names */
    lua_State * L = gL;
    if (completer_ref == LUA_NOREF) return NULL;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, completer_ref);
    lua_pushlstring(L, rl_line_buffer, (size_t)end);
    lua_pushstring(L, text);
    if (lua_pcall(L, 2, 1, 0) != 0 || !lua_istable(L, -1)) {
        lua_settop(L, top);
        return NULL;
    }
    int n = (int)lua_objlen(L, -1);
    if (n == 0) {
        lua_settop(L, top);
        return NULL;
    }
    char ** m = calloc((size_t)n + 2, sizeof *m);
    size_t  common = 0;
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        const char * s = lua_tostring(L, -1);
        m[i] = strdup(s ? s : "");
        lua_pop(L, 1);
        if (i == 1) common = strlen(m[1]);
        else
            while (common > 0 && strncmp(m[1], m[i], common) != 0) common--;
    }
    lua_settop(L, top);
    if (n == 1) {   /* one match: it is the replacement */
        m[0] = m[1];
        m[1] = NULL;
        return m;
    }
    m[0] = strndup(m[1], common);
    return m;
}

/* sys.readline(prompt): the line (without newline), nil at end of input, or
 * false when Ctrl-C cancelled the line. */
static int l_readline(lua_State * L) {
    const char * prompt = luaL_optstring(L, 1, "> ");
    prompt_sigint = 0;
    set_mode(MODE_PROMPT);
    if (is_tty) {
        char * line = readline(prompt);
        set_mode(MODE_OFF);
        if (prompt_sigint) {
            free(line);
            fputc('\n', stdout);
            fflush(stdout);
            lua_pushboolean(L, 0);
            return 1;
        }
        if (!line) return 0;
        lua_pushstring(L, line);
        free(line);
        return 1;
    }
    char   buf[4096];
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int got = 0;
    for (;;) {
        if (!fgets(buf, sizeof buf, stdin)) break;
        got = 1;
        size_t n = strlen(buf);
        if (n > 0 && buf[n - 1] == '\n') {
            luaL_addlstring(&b, buf, n - 1);
            break;
        }
        luaL_addlstring(&b, buf, n);
    }
    set_mode(MODE_OFF);
    if (prompt_sigint) {
        clearerr(stdin);
        lua_pushboolean(L, 0);
        return 1;
    }
    if (!got) return 0;
    luaL_pushresult(&b);
    return 1;
}

/* sys.add_history(line): remembered for the arrows, and saved in the history file. */
static int l_add_history(lua_State * L) {
    const char * line = luaL_checkstring(L, 1);
    if (!is_tty || !*line) return 0;
    add_history(line);
    if (history_path[0]) write_history(history_path);
    return 0;
}

static int l_set_completer(lua_State * L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
    lua_pushvalue(L, 1);
    completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

/* sys.now(): seconds on a monotonic clock. */
static int l_now(lua_State * L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

/* sys.protect(on): true while typed code runs (Ctrl-C interrupts it), false after. */
static int l_protect(lua_State * L) {
    set_mode(lua_toboolean(L, 1) ? MODE_EVAL : MODE_OFF);
    return 0;
}

static void setup_line_editing(void) {
    const char * h = getenv("TIDE_HISTORY");
    const char * home = getenv("HOME");
    if (h) snprintf(history_path, sizeof history_path, "%s", h);
    else if (home) snprintf(history_path, sizeof history_path, "%s/.tide_history", home);
    if (!is_tty) return;
    rl_readline_name = "tide";
    rl_catch_signals = 0;   /* ours: libedit's would re-raise SIGINT */
    static char breaks[] = " \t\n\"\\'`@$><=;|&{}()[],+-*/%^~#";
    rl_basic_word_break_characters = breaks;
    rl_completer_word_break_characters = breaks;
    rl_attempted_completion_function = complete;
    rl_completion_append_character = '\0';
    using_history();
    stifle_history(1000);
    if (history_path[0]) read_history(history_path);
}

static int run_repl(lua_State * L) {
    const tide_lua_paths * p = tide_lua_get_paths();
    is_tty = isatty(STDIN_FILENO);
    idle_mode = MODE_PROMPT;
    setup_line_editing();
    if (luaL_loadfile(L, p->repl) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
        message(lua_tostring(L, -1));
        return 1;
    }
    int repl = lua_gettop(L);
    static const luaL_Reg sys[] = {{"readline", l_readline},   {"add_history", l_add_history},
                                   {"set_completer", l_set_completer}, {"now", l_now},
                                   {"protect", l_protect},     {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, sys);
    lua_pushboolean(L, is_tty);
    lua_setfield(L, -2, "tty");
    lua_pushstring(L, history_path);
    lua_setfield(L, -2, "history_file");
    int systab = lua_gettop(L);
    for (;;) {   /* run returns at end of input; an error that escapes it (a stray Ctrl-C) restarts it */
        lua_getfield(L, repl, "run");
        lua_pushvalue(L, systab);
        set_mode(MODE_OFF);
        int st = lua_pcall(L, 1, 0, 0);
        set_mode(MODE_OFF);
        if (st == 0) break;
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    if (is_tty) fputc('\n', stdout);
    return 0;
}

/* -- main ------------------------------------------------------------------------ */

static void export_paths(void) {
    const tide_lua_paths * p = tide_lua_get_paths();
    if (p->library[0]) setenv("TIDE_LIBRARY", p->library, 1);
    const char * old = getenv("LUA_PATH");
    size_t       n   = strlen(p->lua_path);
    if (old && strncmp(old, p->lua_path, n) == 0) return;   /* a tide started by a tide */
    size_t len = n + (old ? strlen(old) : 1) + 2;
    char * v   = malloc(len);
    snprintf(v, len, "%s;%s", p->lua_path, old ? old : ";");
    setenv("LUA_PATH", v, 1);
    free(v);
}

static void set_arg_table(lua_State * L, int argc, char ** argv, int script) {
    int base = script < argc ? script : 0;
    lua_createtable(L, argc - base, base + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - base);
    }
    lua_setglobal(L, "arg");
}

/* os.exit, after the queued work has run. exit() runs the exit handlers in
 * reverse order of registration, and cuBLAS registers the teardown of state
 * it makes lazily (its GEMM heuristics) after libtide registered the engine's
 * drain: a product still queued then ran on torn-down state and crashed the
 * process on exit (an H100, a script ending with a product queued). */
static int exit_synced(lua_State * L) {
    (void)tide_sync();
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

int main(int argc, char ** argv) {
    if (argv[0] && argv[0][0]) progname = argv[0];
    int script = argc, interactive = 0, version = 0, has_e = 0;
    for (int i = 1; i < argc; i++) {   /* options up to the script */
        const char * a = argv[i];
        if (a[0] != '-' || strcmp(a, "-") == 0) { script = i; break; }
        if (strcmp(a, "--") == 0) { script = i + 1; break; }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) { version = 1; continue; }
        if (strcmp(a, "-i") == 0) { interactive = 1; continue; }
        if (strncmp(a, "-e", 2) == 0 || strncmp(a, "-l", 2) == 0) {
            if (a[2] == 0 && (i + 1 >= argc || !argv[i + 1])) {
                fprintf(stderr, "%s: '%s' needs an argument\n", progname, a);
                usage(stderr);
                return 1;
            }
            if (a[2] == 0) i++;
            has_e |= a[1] == 'e';
            continue;
        }
        fprintf(stderr, "%s: unknown option '%s'\n", progname, a);
        usage(stderr);
        return 1;
    }
    if (version) {
        printf("tide %s (%s)\n", tide_version(), LUAJIT_VERSION);
        if (script == argc && !has_e && !interactive) return 0;
    }
    export_paths();
    lua_State * L = luaL_newstate();
    if (!L) { message("cannot create a Lua state: out of memory"); return 1; }
    gL = L;
    lua_gc(L, LUA_GCSTOP, 0);
    luaL_openlibs(L);
    lua_gc(L, LUA_GCRESTART, -1);
    set_arg_table(L, argc, argv, script);

    lua_pushcfunction(L, luaopen_tide);
    if (dochunk(L, 0) != 0) return 1;   /* stack: luaopen_tide, called with a traceback */
    lua_getfield(L, LUA_REGISTRYINDEX, "tide.module");
    lua_setglobal(L, "tide");
    lua_getglobal(L, "os");   /* os.exit waits for queued work first: see exit_synced */
    lua_getfield(L, -1, "exit");
    lua_pushcclosure(L, exit_synced, 1);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);

    int st = 0;
    for (int i = 1; i < script && st == 0; i++) {   /* -e and -l, in order */
        const char * a = argv[i];
        if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l')) continue;
        const char * v = a[2] ? a + 2 : argv[++i];
        if (a[1] == 'e') st = dochunk(L, luaL_loadbuffer(L, v, strlen(v), "=(command line)"));
        else st = dolibrary(L, v);
    }
    if (st == 0 && script < argc) st = doscript(L, argc, argv, script);
    if (st == 0 && (interactive || (script == argc && !has_e && !version))) {
        if (interactive || isatty(STDIN_FILENO)) st = run_repl(L);
        else st = dochunk(L, luaL_loadfile(L, NULL));
    }
    (void)tide_sync();   /* before exit(): see exit_synced */
    lua_close(L);
    return st == 0 ? 0 : 1;
}
