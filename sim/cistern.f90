! SPDX-License-Identifier: MIT
!
! cistern.f90 - the Fortran module of cistern: the simulation client of
! cistern_sim.h and the plain segment and remote calls a simulation needs.
!
! Every function returns an integer: 0 (or a count, or an index) on success,
! a negative errno on failure, as the C calls do; cistern_strerror(rc) and
! cistern_sim_problem(sim) say what went wrong. Handles are opaque derived
! types; names and endpoints are ordinary Fortran strings (trailing blanks
! are dropped). Arrays may be of any rank (a section that is not contiguous
! is copied first); puts take the number of elements to send, and the
! simulation client's writes the whole array. docs/SIMULATIONS.md shows a
! time loop.
!
! Link with -lcistern_fortran -lcistern-remote -lcistern (CMake:
! cistern::fortran). The MPI gather, cistern_mpi_gather(), lives in
! libcistern_mpi (cistern::mpi).
module cistern
  use, intrinsic :: iso_c_binding
  implicit none
  private

  ! The dtypes of a schema (enum cistern_dtype).
  integer(c_int), parameter, public :: CISTERN_INT8 = 0, CISTERN_INT16 = 1, &
       CISTERN_INT32 = 2, CISTERN_INT64 = 3, CISTERN_UINT8 = 4, CISTERN_UINT16 = 5, &
       CISTERN_UINT32 = 6, CISTERN_UINT64 = 7, CISTERN_FLOAT16 = 8, &
       CISTERN_FLOAT32 = 9, CISTERN_FLOAT64 = 10, CISTERN_BOOL = 11

  ! Results worth testing for (Linux errno values, negated).
  integer(c_int), parameter, public :: CISTERN_ENOENT = -2, CISTERN_EAGAIN = -11, &
       CISTERN_EINVAL = -22, CISTERN_EPIPE = -32, CISTERN_ENODATA = -61, CISTERN_EOD = -61, &
       CISTERN_EMSGSIZE = -90, CISTERN_EPROTOTYPE = -91, CISTERN_ECONNRESET = -104, &
       CISTERN_ETIMEDOUT = -110

  ! A segment attached with cistern_attach().
  type, public :: cistern_segment
    private
    type(c_ptr) :: p = c_null_ptr
  end type

  ! A slot reserved with cistern_reserve().
  type, public :: cistern_slot
    private
    type(c_ptr) :: p = c_null_ptr
    integer(c_int) :: itemsize = 0
  end type

  ! A connection to a server (cistern serve) made with cistern_remote_connect().
  type, public :: cistern_remote
    private
    type(c_ptr) :: p = c_null_ptr
  end type

  ! A simulation client opened with cistern_sim_open(). bind(C) so that
  ! cistern_mpi_gather() can take it as it is.
  type, bind(C), public :: cistern_sim
    private
    type(c_ptr) :: p = c_null_ptr
  end type

  public :: cistern_attach, cistern_detach, cistern_put, cistern_reserve, cistern_commit, &
       cistern_abort, cistern_producer_done, cistern_strerror, &
       cistern_remote_connect, cistern_remote_put, cistern_remote_producer_done, &
       cistern_remote_close, &
       cistern_sim_open, cistern_sim_field, cistern_sim_write, cistern_sim_send, &
       cistern_sim_done, cistern_sim_close, cistern_sim_problem, cistern_mpi_gather

  interface cistern_put
    module procedure put_float, put_double
  end interface

  interface cistern_reserve
    module procedure reserve_float, reserve_double
  end interface

  interface cistern_remote_put
    module procedure remote_put_float, remote_put_double
  end interface

  interface cistern_sim_write
    module procedure sim_write_float, sim_write_double, sim_write_int32, sim_write_int64
  end interface

  interface
    ! cistern_mpi_gather_f() of libcistern_mpi: every rank of the Fortran
    ! communicator comm passes its part of count elements; the parts, in rank
    ! order, fill field `field` of the root's client (other ranks may pass a
    ! client never opened). Collective; every rank gets the same result.
    integer(c_int) function cistern_mpi_gather(sim, field, part, count, comm, root) &
         bind(C, name='cistern_mpi_gather_f')
      import :: c_int, cistern_sim
      type(cistern_sim), intent(in) :: sim
      integer(c_int), value :: field
      type(*), dimension(*), intent(in) :: part
      integer(c_int), value :: count, comm, root
    end function

    integer(c_int) function c_attach(name, out) bind(C, name='cistern_attach')
      import :: c_int, c_char, c_ptr
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), intent(out) :: out
    end function

    integer(c_int) function c_detach(c) bind(C, name='cistern_detach')
      import :: c_int, c_ptr
      type(c_ptr), value :: c
    end function

    integer(c_int) function c_put(c, buf, len, meta, timeout_ms) bind(C, name='cistern_put')
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: c, buf, meta
      integer(c_size_t), value :: len
      integer(c_int), value :: timeout_ms
    end function

    integer(c_int) function c_producer_done(c) bind(C, name='cistern_producer_done')
      import :: c_int, c_ptr
      type(c_ptr), value :: c
    end function

    type(c_ptr) function c_strerror(err) bind(C, name='cistern_strerror')
      import :: c_int, c_ptr
      integer(c_int), value :: err
    end function

    integer(c_int) function c_reserve(c, slot, data, capacity, timeout_ms) &
         bind(C, name='cistern_sim_reserve')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: c
      type(c_ptr), intent(out) :: slot, data
      integer(c_int64_t), intent(out) :: capacity
      integer(c_int), value :: timeout_ms
    end function

    integer(c_int) function c_commit(c, slot, len, sim_id, time_step) &
         bind(C, name='cistern_sim_commit')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: c, slot
      integer(c_int64_t), value :: len
      integer(c_int), value :: sim_id, time_step
    end function

    integer(c_int) function c_abort(c, slot) bind(C, name='cistern_sim_abort')
      import :: c_int, c_ptr
      type(c_ptr), value :: c, slot
    end function

    integer(c_int) function c_remote_connect(endpoint, opts, out) &
         bind(C, name='cistern_remote_connect')
      import :: c_int, c_char, c_ptr
      character(kind=c_char), intent(in) :: endpoint(*)
      type(c_ptr), value :: opts
      type(c_ptr), intent(out) :: out
    end function

    integer(c_int) function c_remote_put(r, buf, len, meta, timeout_ms) &
         bind(C, name='cistern_remote_put')
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: r, buf, meta
      integer(c_size_t), value :: len
      integer(c_int), value :: timeout_ms
    end function

    integer(c_int) function c_remote_producer_done(r, timeout_ms) &
         bind(C, name='cistern_remote_producer_done')
      import :: c_int, c_ptr
      type(c_ptr), value :: r
      integer(c_int), value :: timeout_ms
    end function

    integer(c_int) function c_remote_close(r) bind(C, name='cistern_remote_close')
      import :: c_int, c_ptr
      type(c_ptr), value :: r
    end function

    integer(c_int) function c_sim_open(target, sim_id, out) bind(C, name='cistern_sim_open')
      import :: c_int, c_char, c_ptr
      character(kind=c_char), intent(in) :: target(*)
      integer(c_int), value :: sim_id
      type(c_ptr), intent(out) :: out
    end function

    integer(c_int) function c_sim_field(s, name, dtype, count) bind(C, name='cistern_sim_field')
      import :: c_int, c_char, c_ptr, c_int64_t
      type(c_ptr), value :: s
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: count
    end function

    integer(c_int) function c_sim_write(s, field, data) bind(C, name='cistern_sim_write')
      import :: c_int, c_ptr
      type(c_ptr), value :: s, data
      integer(c_int), value :: field
    end function

    integer(c_int64_t) function c_sim_field_bytes(s, field, itemsize) &
         bind(C, name='cistern_sim_field_bytes')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: s, itemsize
      integer(c_int), value :: field
    end function

    integer(c_int) function c_sim_send(s, time_step, timeout_ms) bind(C, name='cistern_sim_send')
      import :: c_int, c_ptr
      type(c_ptr), value :: s
      integer(c_int), value :: time_step, timeout_ms
    end function

    integer(c_int) function c_sim_done(s, timeout_ms) bind(C, name='cistern_sim_done')
      import :: c_int, c_ptr
      type(c_ptr), value :: s
      integer(c_int), value :: timeout_ms
    end function

    integer(c_int) function c_sim_close(s) bind(C, name='cistern_sim_close')
      import :: c_int, c_ptr
      type(c_ptr), value :: s
    end function

    type(c_ptr) function c_sim_problem(s) bind(C, name='cistern_sim_problem')
      import :: c_ptr
      type(c_ptr), value :: s
    end function

    integer(c_size_t) function c_strlen(s) bind(C, name='strlen')
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

  ! struct cistern_meta, for the puts.
  type, bind(C) :: meta_t
    integer(c_int64_t) :: sample_id = 0
    integer(c_int) :: sim_id = 0
    integer(c_int) :: time_step = 0
  end type

contains

  ! A Fortran string as a NUL-terminated C string, trailing blanks dropped.
  pure function cstr(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: c
    c = trim(s) // c_null_char
  end function

  ! A C string as a Fortran string.
  function fstr(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  integer function timeout_or_forever(timeout_ms)
    integer(c_int), intent(in), optional :: timeout_ms
    timeout_or_forever = -1
    if (present(timeout_ms)) timeout_or_forever = timeout_ms
  end function

  ! ------------------------------------------------------------ segments

  ! Attach to segment `name` (cistern_attach()).
  integer(c_int) function cistern_attach(name, seg)
    character(len=*), intent(in) :: name
    type(cistern_segment), intent(out) :: seg
    cistern_attach = c_attach(cstr(name), seg%p)
  end function

  ! Detach (cistern_detach()); the handle is unusable afterwards.
  integer(c_int) function cistern_detach(seg)
    type(cistern_segment), intent(inout) :: seg
    cistern_detach = c_detach(seg%p)
    seg%p = c_null_ptr
  end function

  ! Put the first n reals (float32) of data as one sample (cistern_put());
  ! timeout_ms as in C, default forever. n above size(data) is CISTERN_EINVAL.
  integer(c_int) function put_float(seg, data, n, sim_id, time_step, timeout_ms)
    type(cistern_segment), intent(in) :: seg
    real(c_float), intent(in), target, contiguous :: data(..)
    integer(c_int), intent(in) :: n, sim_id, time_step
    integer(c_int), intent(in), optional :: timeout_ms
    type(meta_t), target :: meta
    put_float = CISTERN_EINVAL
    if (n < 0 .or. n > size(data)) return
    meta = meta_t(0, sim_id, time_step)
    put_float = c_put(seg%p, c_loc(data), int(n, c_size_t) * 4, c_loc(meta), &
         timeout_or_forever(timeout_ms))
  end function

  ! Put n doubles (float64) as one sample.
  integer(c_int) function put_double(seg, data, n, sim_id, time_step, timeout_ms)
    type(cistern_segment), intent(in) :: seg
    real(c_double), intent(in), target, contiguous :: data(..)
    integer(c_int), intent(in) :: n, sim_id, time_step
    integer(c_int), intent(in), optional :: timeout_ms
    type(meta_t), target :: meta
    put_double = CISTERN_EINVAL
    if (n < 0 .or. n > size(data)) return
    meta = meta_t(0, sim_id, time_step)
    put_double = c_put(seg%p, c_loc(data), int(n, c_size_t) * 8, c_loc(meta), &
         timeout_or_forever(timeout_ms))
  end function

  ! Reserve a slot (cistern_reserve()) and point data at it, as many reals
  ! as fit; fill them, then cistern_commit() or cistern_abort().
  integer(c_int) function reserve_float(seg, slot, data, timeout_ms)
    type(cistern_segment), intent(in) :: seg
    type(cistern_slot), intent(out) :: slot
    real(c_float), pointer, intent(out) :: data(:)
    integer(c_int), intent(in), optional :: timeout_ms
    type(c_ptr) :: p
    integer(c_int64_t) :: capacity
    nullify(data)
    reserve_float = c_reserve(seg%p, slot%p, p, capacity, timeout_or_forever(timeout_ms))
    if (reserve_float /= 0) return
    slot%itemsize = 4
    call c_f_pointer(p, data, [capacity / 4])
  end function

  ! Reserve a slot and point data at it as doubles.
  integer(c_int) function reserve_double(seg, slot, data, timeout_ms)
    type(cistern_segment), intent(in) :: seg
    type(cistern_slot), intent(out) :: slot
    real(c_double), pointer, intent(out) :: data(:)
    integer(c_int), intent(in), optional :: timeout_ms
    type(c_ptr) :: p
    integer(c_int64_t) :: capacity
    nullify(data)
    reserve_double = c_reserve(seg%p, slot%p, p, capacity, timeout_or_forever(timeout_ms))
    if (reserve_double /= 0) return
    slot%itemsize = 8
    call c_f_pointer(p, data, [capacity / 8])
  end function

  ! Publish the first n elements of a reserved slot (cistern_commit()).
  integer(c_int) function cistern_commit(seg, slot, n, sim_id, time_step)
    type(cistern_segment), intent(in) :: seg
    type(cistern_slot), intent(inout) :: slot
    integer(c_int), intent(in) :: n, sim_id, time_step
    cistern_commit = c_commit(seg%p, slot%p, int(n, c_int64_t) * slot%itemsize, sim_id, time_step)
    if (cistern_commit == 0) slot%p = c_null_ptr
  end function

  ! Give a reserved slot back unpublished (cistern_abort()).
  integer(c_int) function cistern_abort(seg, slot)
    type(cistern_segment), intent(in) :: seg
    type(cistern_slot), intent(inout) :: slot
    cistern_abort = c_abort(seg%p, slot%p)
    if (cistern_abort == 0) slot%p = c_null_ptr
  end function

  ! Declare one expected producer done (cistern_producer_done()): the count still expected.
  integer(c_int) function cistern_producer_done(seg)
    type(cistern_segment), intent(in) :: seg
    cistern_producer_done = c_producer_done(seg%p)
  end function

  ! A sentence for a result.
  function cistern_strerror(rc) result(s)
    integer(c_int), intent(in) :: rc
    character(len=:), allocatable :: s
    s = fstr(c_strerror(rc))
  end function

  ! ------------------------------------------------------------ remote

  ! Connect to a server at endpoint, "tcp://HOST:PORT" or "ipc://PATH" (no keys).
  integer(c_int) function cistern_remote_connect(endpoint, conn)
    character(len=*), intent(in) :: endpoint
    type(cistern_remote), intent(out) :: conn
    cistern_remote_connect = c_remote_connect(cstr(endpoint), c_null_ptr, conn%p)
  end function

  ! Send n reals as one sample (cistern_remote_put()).
  integer(c_int) function remote_put_float(conn, data, n, sim_id, time_step, timeout_ms)
    type(cistern_remote), intent(in) :: conn
    real(c_float), intent(in), target, contiguous :: data(..)
    integer(c_int), intent(in) :: n, sim_id, time_step
    integer(c_int), intent(in), optional :: timeout_ms
    type(meta_t), target :: meta
    remote_put_float = CISTERN_EINVAL
    if (n < 0 .or. n > size(data)) return
    meta = meta_t(0, sim_id, time_step)
    remote_put_float = c_remote_put(conn%p, c_loc(data), int(n, c_size_t) * 4, c_loc(meta), &
         timeout_or_forever(timeout_ms))
  end function

  ! Send n doubles as one sample.
  integer(c_int) function remote_put_double(conn, data, n, sim_id, time_step, timeout_ms)
    type(cistern_remote), intent(in) :: conn
    real(c_double), intent(in), target, contiguous :: data(..)
    integer(c_int), intent(in) :: n, sim_id, time_step
    integer(c_int), intent(in), optional :: timeout_ms
    type(meta_t), target :: meta
    remote_put_double = CISTERN_EINVAL
    if (n < 0 .or. n > size(data)) return
    meta = meta_t(0, sim_id, time_step)
    remote_put_double = c_remote_put(conn%p, c_loc(data), int(n, c_size_t) * 8, c_loc(meta), &
         timeout_or_forever(timeout_ms))
  end function

  ! Wait until the server has every sample, then declare this producer done.
  integer(c_int) function cistern_remote_producer_done(conn, timeout_ms)
    type(cistern_remote), intent(in) :: conn
    integer(c_int), intent(in), optional :: timeout_ms
    cistern_remote_producer_done = c_remote_producer_done(conn%p, timeout_or_forever(timeout_ms))
  end function

  ! Close the connection.
  integer(c_int) function cistern_remote_close(conn)
    type(cistern_remote), intent(inout) :: conn
    cistern_remote_close = c_remote_close(conn%p)
    conn%p = c_null_ptr
  end function

  ! ------------------------------------------------------------ simulation client

  ! Open a client on a segment name or a server endpoint (cistern_sim_open()).
  integer(c_int) function cistern_sim_open(target, sim_id, sim)
    character(len=*), intent(in) :: target
    integer(c_int), intent(in) :: sim_id
    type(cistern_sim), intent(out) :: sim
    cistern_sim_open = c_sim_open(cstr(target), sim_id, sim%p)
  end function

  ! Declare a field of the schema: its dtype (CISTERN_FLOAT64, ...) and
  ! element count. Returns its index for cistern_sim_write().
  integer(c_int) function cistern_sim_field(sim, name, dtype, count)
    type(cistern_sim), intent(in) :: sim
    character(len=*), intent(in) :: name
    integer(c_int), intent(in) :: dtype, count
    cistern_sim_field = c_sim_field(sim%p, cstr(name), dtype, int(count, c_int64_t))
  end function

  ! True if field `field` of sim is declared with n elements of `itemsize` bytes.
  logical function field_is(sim, field, itemsize, n)
    type(cistern_sim), intent(in) :: sim
    integer(c_int), intent(in) :: field, itemsize
    integer, intent(in) :: n
    integer(c_int32_t), target :: got
    integer(c_int64_t) :: bytes
    got = 0
    bytes = c_sim_field_bytes(sim%p, field, c_loc(got))  ! sets got: call it first
    field_is = bytes == int(n, c_int64_t) * itemsize .and. got == itemsize
  end function

  ! Write a declared field's value into the step: an array (of any rank) or
  ! a scalar of as many elements as the field. An array of another kind
  ! than the field's dtype, or of another size, is CISTERN_EINVAL.
  integer(c_int) function sim_write_float(sim, field, data)
    type(cistern_sim), intent(in) :: sim
    integer(c_int), intent(in) :: field
    real(c_float), intent(in), target, contiguous :: data(..)
    sim_write_float = CISTERN_EINVAL
    if (field_is(sim, field, 4_c_int, int(size(data)))) &
         sim_write_float = c_sim_write(sim%p, field, c_loc(data))
  end function

  integer(c_int) function sim_write_double(sim, field, data)
    type(cistern_sim), intent(in) :: sim
    integer(c_int), intent(in) :: field
    real(c_double), intent(in), target, contiguous :: data(..)
    sim_write_double = CISTERN_EINVAL
    if (field_is(sim, field, 8_c_int, int(size(data)))) &
         sim_write_double = c_sim_write(sim%p, field, c_loc(data))
  end function

  integer(c_int) function sim_write_int32(sim, field, data)
    type(cistern_sim), intent(in) :: sim
    integer(c_int), intent(in) :: field
    integer(c_int32_t), intent(in), target, contiguous :: data(..)
    sim_write_int32 = CISTERN_EINVAL
    if (field_is(sim, field, 4_c_int, int(size(data)))) &
         sim_write_int32 = c_sim_write(sim%p, field, c_loc(data))
  end function

  integer(c_int) function sim_write_int64(sim, field, data)
    type(cistern_sim), intent(in) :: sim
    integer(c_int), intent(in) :: field
    integer(c_int64_t), intent(in), target, contiguous :: data(..)
    sim_write_int64 = CISTERN_EINVAL
    if (field_is(sim, field, 8_c_int, int(size(data)))) &
         sim_write_int64 = c_sim_write(sim%p, field, c_loc(data))
  end function

  ! Send the step (cistern_sim_send()); timeout_ms as in C, default forever.
  integer(c_int) function cistern_sim_send(sim, time_step, timeout_ms)
    type(cistern_sim), intent(in) :: sim
    integer(c_int), intent(in) :: time_step
    integer(c_int), intent(in), optional :: timeout_ms
    cistern_sim_send = c_sim_send(sim%p, time_step, timeout_or_forever(timeout_ms))
  end function

  ! Mark the simulation done (cistern_sim_done()).
  integer(c_int) function cistern_sim_done(sim, timeout_ms)
    type(cistern_sim), intent(in) :: sim
    integer(c_int), intent(in), optional :: timeout_ms
    cistern_sim_done = c_sim_done(sim%p, timeout_or_forever(timeout_ms))
  end function

  ! Close the client; call it before MPI_Finalize.
  integer(c_int) function cistern_sim_close(sim)
    type(cistern_sim), intent(inout) :: sim
    cistern_sim_close = c_sim_close(sim%p)
    sim%p = c_null_ptr
  end function

  ! Why the last call on sim failed (or, for a client that did not open, why the open failed).
  function cistern_sim_problem(sim) result(s)
    type(cistern_sim), intent(in) :: sim
    character(len=:), allocatable :: s
    s = fstr(c_sim_problem(sim%p))
  end function
end module cistern
