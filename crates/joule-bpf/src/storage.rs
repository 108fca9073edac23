//! Heap storage for a libbpf-rs `OpenObject`, so a loaded skeleton (which borrows it) can live
//! inside a struct that owns both, instead of the caller keeping a `MaybeUninit` alive.

use libbpf_rs::OpenObject;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

pub(crate) struct ObjectStorage(NonNull<MaybeUninit<OpenObject>>);

impl ObjectStorage {
    pub(crate) fn new() -> Self {
        Self(NonNull::from(Box::leak(Box::new(MaybeUninit::uninit()))))
    }

    /// # Safety
    /// Call once; whatever borrows the result must be dropped before `self`.
    pub(crate) unsafe fn get(&mut self) -> &'static mut MaybeUninit<OpenObject> {
        // SAFETY: the pointer is a live Box allocation until Drop; the caller keeps the
        // 'static borrow shorter than `self` (this function's contract).
        unsafe { &mut *self.0.as_ptr() }
    }
}

impl Drop for ObjectStorage {
    fn drop(&mut self) {
        // The skeleton dropped the OpenObject itself; this only frees the allocation
        // (MaybeUninit never drops its content).
        // SAFETY: the pointer came from Box::leak in `new` and is freed exactly once, here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

// SAFETY: the storage is only an allocation; the object in it is reached through the skeleton,
// which libbpf-rs already declares Send.
unsafe impl Send for ObjectStorage {}
