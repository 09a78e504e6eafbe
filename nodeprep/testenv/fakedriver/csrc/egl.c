/* A fake glvnd EGL vendor library: libglvnd calls __egl_Main when it
 * loads the vendor; it acts out FAKE_FAULT there and then refuses. */
#include <stdint.h>
#include <stdio.h>
#include "fault.h"

unsigned int __egl_Main(uint32_t version, const void *exports, void *vendor, void *imports) {
	(void)version;
	(void)exports;
	(void)vendor;
	(void)imports;
	np_fault("fake EGL vendor");
	return 0; /* EGL_FALSE: not a usable vendor */
}
