/* A fake glvnd EGL vendor library. Alone, libglvnd calls __egl_Main when
 * it loads the vendor; it acts out FAKE_FAULT there and then refuses, so
 * glvnd has no vendor.
 *
 * With FAKE_EGL_WRAP naming a real vendor library (Mesa's
 * libEGL_mesa.so.0), it is that vendor with the changes FAKE_EGL_FAULT
 * lists (comma-separated):
 *   gles-2-only  a driver that offers OpenGL ES 2.0 and nothing newer:
 *                EGL_CLIENT_APIS says "OpenGL_ES", eglBindAPI refuses
 *                desktop OpenGL, eglCreateContext refuses (EGL_BAD_MATCH)
 *                a context of EGL_CONTEXT_MAJOR_VERSION 3 or more, and
 *                glGetString says "OpenGL ES 2.0" (GL_VERSION) and GLSL ES
 *                1.00 (GL_SHADING_LANGUAGE_VERSION). Mesa's own
 *                MESA_GLES_VERSION_OVERRIDE does not stand in: Mesa 22
 *                still creates the 3.x context wgpu asks for.
 * The functions are changed where glvnd takes them from the vendor: its
 * getProcAddress import, which fills glvnd's EGL dispatch and, for gl*
 * names, the GL dispatch table (libglvnd, include/glvnd/libeglabi.h).
 * Everything else is the real vendor's. */
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <dlfcn.h>
#include <glvnd/libeglabi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fault.h"

#define GL_VERSION 0x1F02
#define GL_SHADING_LANGUAGE_VERSION 0x8B8C

typedef EGLBoolean (*egl_main_fn)(uint32_t, const __EGLapiExports *, __EGLvendorInfo *, __EGLapiImports *);
typedef const unsigned char *(*get_string_fn)(unsigned int);

static __EGLapiImports real;
static PFNEGLCREATECONTEXTPROC real_create_context;
static PFNEGLGETERRORPROC real_get_error;
static PFNEGLQUERYSTRINGPROC real_query_string;
static get_string_fn real_get_string;
static __thread EGLint pending_error; /* EGL_SUCCESS (0 until set) or the refusal's error */

/* fault_is says whether FAKE_EGL_FAULT's comma-separated list holds what. */
static int fault_is(const char *what)
{
	const char *v = getenv("FAKE_EGL_FAULT");
	size_t n = strlen(what);
	while (v != NULL && *v) {
		const char *end = strchr(v, ',');
		size_t len = end ? (size_t)(end - v) : strlen(v);
		if (len == n && strncmp(v, what, n) == 0)
			return 1;
		v = end ? end + 1 : NULL;
	}
	return 0;
}

static EGLBoolean fake_supports_api(EGLenum api)
{
	if (fault_is("gles-2-only") && api != EGL_OPENGL_ES_API)
		return EGL_FALSE;
	return real.getSupportsAPI(api);
}

static EGLContext EGLAPIENTRY fake_CreateContext(EGLDisplay dpy, EGLConfig cfg, EGLContext share, const EGLint *attrs)
{
	pending_error = 0;
	if (fault_is("gles-2-only"))
		for (const EGLint *a = attrs; a != NULL && a[0] != EGL_NONE; a += 2)
			if (a[0] == EGL_CONTEXT_MAJOR_VERSION && a[1] >= 3) {
				fprintf(stderr, "fake EGL vendor: gles-2-only: refusing a context of version %d\n", a[1]);
				pending_error = EGL_BAD_MATCH;
				return EGL_NO_CONTEXT;
			}
	return real_create_context(dpy, cfg, share, attrs);
}

static EGLint EGLAPIENTRY fake_GetError(void)
{
	if (pending_error != 0) {
		EGLint e = pending_error;
		pending_error = 0;
		real_get_error(); /* the vendor's own error is reset as well */
		return e;
	}
	return real_get_error();
}

static const char *EGLAPIENTRY fake_QueryString(EGLDisplay dpy, EGLint name)
{
	if (fault_is("gles-2-only") && dpy != EGL_NO_DISPLAY && name == EGL_CLIENT_APIS) {
		if (real_query_string(dpy, EGL_VENDOR) == NULL)
			return NULL; /* not initialized: the vendor's own error */
		return "OpenGL_ES";
	}
	return real_query_string(dpy, name);
}

static const unsigned char *fake_glGetString(unsigned int name)
{
	if (fault_is("gles-2-only")) {
		if (name == GL_VERSION)
			return (const unsigned char *)"OpenGL ES 2.0 (fake EGL vendor: gles-2-only)";
		if (name == GL_SHADING_LANGUAGE_VERSION)
			return (const unsigned char *)"OpenGL ES GLSL ES 1.00";
	}
	return real_get_string(name);
}

static void *fake_get_proc_address(const char *name)
{
	void *f = real.getProcAddress(name);
	if (f == NULL)
		return NULL;
#define WRAP(n, slot, fn)                         \
	if (strcmp(name, n) == 0) {               \
		slot = (__typeof__(slot))f;       \
		return (void *)fn;                \
	}
	WRAP("eglCreateContext", real_create_context, fake_CreateContext);
	WRAP("eglGetError", real_get_error, fake_GetError);
	WRAP("eglQueryString", real_query_string, fake_QueryString);
	WRAP("glGetString", real_get_string, fake_glGetString);
#undef WRAP
	return f;
}

EGLBoolean __egl_Main(uint32_t version, const __EGLapiExports *exports, __EGLvendorInfo *vendor, __EGLapiImports *imports)
{
	np_fault("fake EGL vendor");
	const char *path = getenv("FAKE_EGL_WRAP");
	if (path == NULL || *path == 0)
		return EGL_FALSE; /* not a usable vendor */
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		fprintf(stderr, "fake EGL vendor: cannot open %s: %s\n", path, dlerror());
		return EGL_FALSE;
	}
	egl_main_fn real_main = (egl_main_fn)dlsym(lib, "__egl_Main");
	if (real_main == NULL || !real_main(version, exports, vendor, &real))
		return EGL_FALSE;
	*imports = real;
	imports->getSupportsAPI = fake_supports_api;
	imports->getProcAddress = fake_get_proc_address;
	/* Patching glvnd's entry points would bypass the GL dispatch table
	 * and so glGetString's wrapper. */
	imports->isPatchSupported = NULL;
	imports->initiatePatch = NULL;
	imports->releasePatch = NULL;
	imports->patchThreadAttach = NULL;
	return EGL_TRUE;
}
